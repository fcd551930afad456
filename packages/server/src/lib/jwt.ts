import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  createRemoteJWKSet,
  customFetch,
  type JWTVerifyGetKey,
  errors as joseErrors,
  jwtVerify,
  SignJWT,
} from 'jose';
import type { Config } from '../config.js';
import type { Store } from '../storage/db.js';
import { boundedFetch } from './bounded-fetch.js';
import { isUserId } from './schemas.js';

export interface UserClaims {
  sub: string;
}

export interface JwtVerifier {
  verify(token: string): Promise<UserClaims>;
  /** Which tokens are accepted, for the start-up log: e.g. `HS256 (SVC_JWT_SECRET)`. */
  readonly sources: string[];
}

/** The token is not acceptable: the caller's problem (401). */
export class TokenError extends Error {}

/**
 * The identity provider's key set could not be fetched (unreachable, timeout, redirect, over 1 MiB,
 * not a key set) when the cached one was stale or lacked the token's key: the service's problem
 * (503), not the caller's.
 */
export class KeySourceError extends Error {}

/** Asymmetric algorithms accepted from an identity provider's JWKS. */
const JWKS_ALGORITHMS = ['RS256', 'ES256', 'EdDSA'];
/** How long a failed key set fetch waits before the next one (jose's cooldown for unknown kids). */
const JWKS_COOLDOWN_MS = 30_000;
const JWKS_TIMEOUT_MS = 5_000;
/** The largest key set read: 1 MiB, far beyond any provider's handful of keys. */
const JWKS_MAX_BYTES = 1024 * 1024;

/**
 * The provider's key set, cached for SVC_JWT_JWKS_CACHE_SECONDS. A failure to fetch it becomes a
 * KeySourceError; a token whose key is not in a freshly fetched set stays a token error.
 */
function jwksKeys(url: string, cacheSeconds: number): JWTVerifyGetKey {
  const jwks = createRemoteJWKSet(new URL(url), {
    cacheMaxAge: cacheSeconds * 1000,
    cooldownDuration: Math.min(JWKS_COOLDOWN_MS, cacheSeconds * 1000),
    timeoutDuration: JWKS_TIMEOUT_MS,
    // No redirect followed (a redirect is not the key set: 503 as any non-200), no answer over the limit.
    [customFetch]: (href, init) => boundedFetch(href, init, { maxBytes: JWKS_MAX_BYTES }),
  });
  return async (header, token) => {
    try {
      return await jwks(header, token);
    } catch (err) {
      if (
        err instanceof joseErrors.JWKSNoMatchingKey ||
        err instanceof joseErrors.JWKSMultipleMatchingKeys ||
        err instanceof joseErrors.JOSENotSupported
      ) {
        throw err;
      }
      const why = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : '';
      throw new KeySourceError(
        `the identity provider's key set at ${url} could not be fetched${why ? `: ${why}` : ''}`,
      );
    }
  };
}

const SECRET_SETTING = 'jwt_secret';

/** The secret kept in `file`; one that is empty (a write cut short) is refused, never used. */
function storedSecret(file: string): string {
  const secret = readFileSync(file, 'utf8').trim();
  if (secret === '')
    throw new Error(`${file} is empty: delete it to have a new secret generated, or set SVC_JWT_SECRET`);
  return secret;
}

/** How the generated secret file is put in place: a hard link (`fs.linkSync`) unless told otherwise. */
export interface SecretFileLinker {
  link(existingPath: string, newPath: string): void;
}

const hardLinks: SecretFileLinker = { link: linkSync };

/**
 * The HS256 secret: SVC_JWT_SECRET, else one generated on first start and kept beside the embedded
 * store (a file next to the SQLite database) or, on PostgreSQL, in the settings table so that every
 * instance on the same database shares it. There is never a guessable default. `files` links the
 * generated file into place (a hard link by default).
 */
export async function resolveJwtSecret(
  config: Config,
  store: Store,
  files: SecretFileLinker = hardLinks,
): Promise<string | null> {
  if (config.jwtSecret) return config.jwtSecret;
  if (config.jwtJwksUrl) return null;
  if (store.sqlitePath) {
    const file = join(dirname(store.sqlitePath), 'jwt-secret');
    if (existsSync(file)) return storedSecret(file);
    const secret = randomBytes(32).toString('base64url');
    // Written whole under a name of its own, then linked into place: a process reading the file
    // never sees it created but not yet written (it would sign with an empty secret).
    const draft = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    writeFileSync(draft, `${secret}\n`, { mode: 0o600, flag: 'wx' });
    try {
      files.link(draft, file);
      return secret;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Another process put its own in place first: use theirs.
      if (code === 'EEXIST') return storedSecret(file);
      // A file system without hard links: created in place, where a reader that comes too early
      // finds it empty and refuses it (storedSecret) rather than sign with it.
      if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS') {
        try {
          writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
          return secret;
        } catch (again) {
          if ((again as NodeJS.ErrnoException).code === 'EEXIST') return storedSecret(file);
          throw again;
        }
      }
      throw err;
    } finally {
      unlinkSync(draft);
    }
  }
  if (store.dialect === 'postgres') {
    const candidate = randomBytes(32).toString('base64url');
    await store.db
      .insertInto('settings')
      .values({ key: SECRET_SETTING, value: candidate })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    const row = await store.db
      .selectFrom('settings')
      .select('value')
      .where('key', '=', SECRET_SETTING)
      .executeTakeFirstOrThrow();
    return row.value;
  }
  // In-memory SQLite: nothing to keep it beside, the secret lives as long as the process.
  return randomBytes(32).toString('base64url');
}

/**
 * Verifies user tokens. With SVC_JWT_SECRET, HS256 tokens are checked against it; with
 * SVC_JWT_JWKS_URL, RS256/ES256/EdDSA tokens against the provider's key set. With both, both kinds
 * are accepted (each only with its own key: an HS256 token is never checked against a public key).
 */
export function createJwtVerifier(config: Config, secret: string | null): JwtVerifier {
  const options = {
    ...(config.jwtIssuer ? { issuer: config.jwtIssuer } : {}),
    ...(config.jwtAudience ? { audience: config.jwtAudience } : {}),
  };
  const key = secret ? new TextEncoder().encode(secret) : null;
  const jwks = config.jwtJwksUrl ? jwksKeys(config.jwtJwksUrl, config.jwtJwksCacheSeconds) : null;
  const algorithms = [...(key ? ['HS256'] : []), ...(jwks ? JWKS_ALGORITHMS : [])];
  const getKey: JWTVerifyGetKey = async (header, token) => {
    if (header.alg === 'HS256' && key) return key;
    if (header.alg !== 'HS256' && jwks) return jwks(header, token);
    throw new TokenError(`tokens signed with ${header.alg} are not accepted`);
  };
  const sources = [
    ...(key ? [`HS256 (${config.jwtSecret ? 'SVC_JWT_SECRET' : 'generated secret'})`] : []),
    ...(jwks ? [`${JWKS_ALGORITHMS.join('/')} from ${config.jwtJwksUrl}`] : []),
  ];
  return {
    sources,
    async verify(token) {
      try {
        const { payload } = await jwtVerify(token, getKey, { ...options, algorithms });
        if (typeof payload.sub !== 'string' || payload.sub === '')
          throw new TokenError('token has no sub claim');
        // Nothing revokes a user token: one without an expiry would be good for ever.
        if (typeof payload.exp !== 'number') throw new TokenError('token has no exp claim');
        if (!isUserId(payload.sub))
          throw new TokenError(
            'token sub must be 1-200 characters of well-formed Unicode without control characters',
          );
        return { sub: payload.sub };
      } catch (err) {
        if (err instanceof TokenError || err instanceof KeySourceError) throw err;
        if (err instanceof joseErrors.JWTExpired) throw new TokenError('token expired');
        if (err instanceof joseErrors.JOSEError) throw new TokenError(`invalid token: ${err.code}`);
        throw new TokenError('invalid token');
      }
    },
  };
}

export { parseTtl } from './duration.js';

export async function signUserToken(
  secret: string,
  sub: string,
  ttlSeconds: number,
  config: Pick<Config, 'jwtIssuer' | 'jwtAudience'>,
): Promise<string> {
  let jwt = new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + ttlSeconds);
  if (config.jwtIssuer) jwt = jwt.setIssuer(config.jwtIssuer);
  if (config.jwtAudience) jwt = jwt.setAudience(config.jwtAudience);
  return jwt.sign(new TextEncoder().encode(secret));
}
