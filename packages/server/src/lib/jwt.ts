import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createRemoteJWKSet, errors as joseErrors, jwtVerify, SignJWT } from 'jose';
import type { Config } from '../config.js';
import type { Store } from '../storage/db.js';

export interface UserClaims {
  sub: string;
}

export interface JwtVerifier {
  verify(token: string): Promise<UserClaims>;
}

export class TokenError extends Error {}

const SECRET_SETTING = 'jwt_secret';

/**
 * The HS256 secret: SVC_JWT_SECRET, else one generated on first start and kept beside the embedded
 * store (a file next to the SQLite database) or, on PostgreSQL, in the settings table so that every
 * instance on the same database shares it. There is never a guessable default.
 */
export async function resolveJwtSecret(config: Config, store: Store): Promise<string | null> {
  if (config.jwtSecret) return config.jwtSecret;
  if (config.jwtJwksUrl) return null;
  if (store.sqlitePath) {
    const file = join(dirname(store.sqlitePath), 'jwt-secret');
    if (existsSync(file)) return readFileSync(file, 'utf8').trim();
    const secret = randomBytes(32).toString('base64url');
    try {
      writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
      chmodSync(file, 0o600);
      return secret;
    } catch (err) {
      // Another process created it first: use theirs.
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return readFileSync(file, 'utf8').trim();
      throw err;
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

export function createJwtVerifier(config: Config, secret: string | null): JwtVerifier {
  const options = {
    ...(config.jwtIssuer ? { issuer: config.jwtIssuer } : {}),
    ...(config.jwtAudience ? { audience: config.jwtAudience } : {}),
  };
  const key = secret ? new TextEncoder().encode(secret) : null;
  const jwks = !key && config.jwtJwksUrl ? createRemoteJWKSet(new URL(config.jwtJwksUrl)) : null;
  return {
    async verify(token) {
      try {
        const { payload } = key
          ? await jwtVerify(token, key, { ...options, algorithms: ['HS256'] })
          : await jwtVerify(token, jwks!, { ...options, algorithms: ['RS256', 'ES256', 'EdDSA'] });
        if (typeof payload.sub !== 'string' || payload.sub === '')
          throw new TokenError('token has no sub claim');
        return { sub: payload.sub };
      } catch (err) {
        if (err instanceof TokenError) throw err;
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
