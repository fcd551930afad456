import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import { type JwtVerifier, KeySourceError, TokenError } from '../lib/jwt.js';
import type { ApiKeyAuthenticator, KeyPrincipal } from '../modules/api-keys/authenticator.js';
import { looksLikeApiKey } from '../modules/api-keys/keys.js';
import type { KeyScope } from '../modules/api-keys/model.js';
import { sessionCookie } from '../modules/sessions/cookie.js';
import { CSRF_HEADER, type SessionInfo } from '../modules/sessions/model.js';
import type { SessionService } from '../modules/sessions/service.js';
import type { AdminAuthThrottle } from './admin-throttle.js';

export interface UserPrincipal {
  kind: 'user';
  userId: string;
  /** Set when the user came with a dashboard session cookie instead of a bearer token. */
  session?: { id: string } & SessionInfo;
}

export interface AdminPrincipal {
  kind: 'admin';
}

export type Principal = KeyPrincipal | UserPrincipal | AdminPrincipal;

/**
 * Route-level auth mode: `any` = API key or user JWT, `jwt` = user JWT only (API keys get 403),
 * `apiKey` = API key only, `admin` = operator token, `none` = public.
 */
export type AuthMode = 'none' | 'any' | 'jwt' | 'apiKey' | 'admin';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
  }
  interface FastifyContextConfig {
    auth?: AuthMode;
    /** Accept the API key in the `apiKey` query parameter (EventSource cannot set headers). */
    queryApiKey?: boolean;
    /** Answer 401 with code `unauthorized` for every authentication failure (event stream). */
    plainUnauthorized?: boolean;
    /** Scopes an API key needs, any one of them (default `api`); user tokens are not concerned. */
    scopes?: readonly KeyScope[];
  }
}

/** Methods that change nothing: no CSRF token needed with the session cookie. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

const DEFAULT_ROUTE_SCOPES: readonly KeyScope[] = ['api'];

export interface AuthDeps {
  config: Config;
  keys: ApiKeyAuthenticator;
  jwt: JwtVerifier;
  sessions: Pick<SessionService, 'lookup'>;
  /** Refused admin authentications per client address (`req.ip`); past the budget, 429. */
  adminThrottle: AdminAuthThrottle;
  clock: Clock;
}

/**
 * Compares secrets in constant time, their lengths included: both sides are hashed to 32 bytes first,
 * so a wrong guess of another length takes as long as any other and tells nothing of the secret's.
 */
function safeEqual(a: string, b: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(a), digest(b));
}

/**
 * A user token that could not be checked because the identity provider's key set is unreachable:
 * not the caller's fault, so 503 with a retry hint, and a warning for the operator.
 */
export function keySourceUnavailable(request: FastifyRequest, err: KeySourceError): AppError {
  request.log.warn({ err }, 'user token not checked: identity provider key set unavailable');
  return new AppError(
    'service_unavailable',
    'User tokens cannot be checked right now: the identity provider is unreachable; retry later',
    { 'retry-after': '5' },
  );
}

/** The token of an `Authorization: Bearer <token>` header, or null. */
export function bearerToken(request: FastifyRequest): string | null {
  const m = /^Bearer\s+(.+)$/i.exec(request.headers.authorization?.trim() ?? '');
  return m ? m[1]!.trim() : null;
}

export function registerAuth(app: FastifyInstance, deps: AuthDeps): void {
  app.decorateRequest('principal', null);
  app.log.info({ userTokens: deps.jwt.sources }, 'user tokens accepted');

  async function authenticate(request: FastifyRequest): Promise<Principal> {
    const config = request.routeOptions.config;
    const plain = config.plainUnauthorized === true;
    const headerKey = request.headers['x-service-api-key'];
    const token = bearerToken(request);
    let key = typeof headerKey === 'string' && headerKey !== '' ? headerKey : null;
    if (!key && token && looksLikeApiKey(token)) key = token;
    if (!key && !token && config.queryApiKey) {
      const q = (request.query as Record<string, unknown> | undefined)?.apiKey;
      if (typeof q === 'string' && q !== '') key = q;
    }
    if (key) {
      const principal = await deps.keys.authenticate(key);
      if (!principal) {
        throw new AppError(plain ? 'unauthorized' : 'invalid_api_key', 'Invalid or revoked API key');
      }
      return principal;
    }
    if (token) {
      try {
        const claims = await deps.jwt.verify(token);
        return { kind: 'user', userId: claims.sub };
      } catch (err) {
        if (err instanceof KeySourceError) throw keySourceUnavailable(request, err);
        const why = err instanceof TokenError ? err.message : 'invalid token';
        throw new AppError('unauthorized', `Invalid bearer token: ${why}`);
      }
    }
    const cookie = sessionCookie(request);
    if (cookie) return sessionPrincipal(request, cookie);
    throw new AppError(
      'unauthorized',
      'Authentication required: send X-Service-API-Key or Authorization: Bearer <token>',
    );
  }

  /** A dashboard session acts as its user; its writes must carry the session's CSRF token. */
  async function sessionPrincipal(request: FastifyRequest, cookie: string): Promise<UserPrincipal> {
    const session = await deps.sessions.lookup(cookie);
    if (!session) throw new AppError('unauthorized', 'Your session has ended or expired: sign in again');
    if (!SAFE_METHODS.has(request.method)) {
      const sent = request.headers[CSRF_HEADER];
      if (typeof sent !== 'string' || !safeEqual(sent, session.csrfToken)) {
        throw new AppError(
          'csrf_failed',
          `A request made with the session cookie that changes something must send the session's CSRF token in ${CSRF_HEADER}`,
        );
      }
    }
    return { kind: 'user', userId: session.userId, session: { id: cookie, ...session } };
  }

  app.addHook('onRequest', async (request) => {
    // Unknown routes answer 404 whatever the credentials.
    if (!request.routeOptions.url) return;
    const mode: AuthMode = request.routeOptions.config.auth ?? 'any';
    if (mode === 'none') return;
    if (mode === 'admin') {
      const now = deps.clock.now().getTime();
      // A blocked address gets 429 before its token is looked at: a right guess then tells nothing.
      deps.adminThrottle.check(request.ip, now);
      const token = bearerToken(request);
      const expected = deps.config.adminToken;
      if (!expected || !token || !safeEqual(token, expected)) {
        deps.adminThrottle.refused(request.ip, now);
        throw new AppError('unauthorized', 'A valid operator admin token is required');
      }
      request.principal = { kind: 'admin' };
      return;
    }
    const principal = await authenticate(request);
    if (mode === 'jwt' && principal.kind !== 'user') {
      throw new AppError(
        'authorization_error',
        'This endpoint needs a user token (JWT); API keys are not accepted',
      );
    }
    if (mode === 'apiKey' && principal.kind !== 'apiKey') {
      throw new AppError('authorization_error', 'This endpoint needs an API key (X-Service-API-Key)');
    }
    if (principal.kind === 'apiKey') {
      const accepted = request.routeOptions.config.scopes ?? DEFAULT_ROUTE_SCOPES;
      if (!accepted.some((s) => principal.scopes.includes(s))) {
        throw new AppError(
          request.routeOptions.config.plainUnauthorized ? 'unauthorized' : 'authorization_error',
          `This API key lacks the scope this endpoint needs (${accepted.join(' or ')}); its scopes: ${principal.scopes.join(', ') || 'none'}`,
        );
      }
    }
    request.principal = principal;
  });
}
