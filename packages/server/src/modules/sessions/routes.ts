import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { AppError } from '../../lib/errors.js';
import { NoBody } from '../../lib/schemas.js';
import { clearSessionCookie, readCookie, sessionCookie, setSessionCookie, stateCookie } from './cookie.js';
import { OIDC_SIGN_IN_TTL_SECONDS, OIDC_STATE_COOKIE, SESSION_TTL_SECONDS } from './model.js';
import { createOidcSignIn, SignInFailed } from './oidc.js';
import { secret } from './service.js';

const SessionSchema = Type.Object({
  userId: Type.String(),
  csrfToken: Type.String(),
  expiresAt: Type.String(),
});

const MethodsSchema = Type.Object({
  loginLink: Type.Boolean({ description: 'One-time links printed by `svc login-link` always work.' }),
  oidc: Type.Union([Type.Object({ name: Type.String() }), Type.Null()], {
    description: 'Sign-in through the configured OpenID Connect provider, or null when none is configured.',
  }),
});

const Redirect = { 303: Type.Null({ description: 'To the dashboard, or to the identity provider.' }) };

/**
 * The query of a link a person follows in a browser (a login link, the provider's callback): read
 * leniently, since a link cut short, mistyped or repeated must lead to the sign-in page with
 * `?signin=invalid`, never to a JSON error. Anything but one string is no value.
 */
const LinkQuery = Type.Object(
  {
    token: Type.Optional(Type.Unknown()),
    state: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: true },
);

const oneParam = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/**
 * Dashboard sign-in: a login link, or the configured OpenID Connect provider, opens a cookie
 * session; the SPA reads it back and signs out.
 */
export const sessionRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const { sessions, config } = ctx;
  const oidc = config.oidc
    ? createOidcSignIn(config.oidc, `${config.baseUrl}/v1/auth/oidc/callback`, app.log)
    : null;

  app.get(
    '/v1/auth/methods',
    { config: { auth: 'none' }, schema: { response: { 200: MethodsSchema } } },
    async () => ({ loginLink: true, oidc: oidc ? { name: oidc.displayName } : null }),
  );

  app.get(
    '/v1/auth/oidc/login',
    // 404 while no provider is configured.
    { config: { auth: 'none' }, schema: { response: Redirect, documented: { errors: ['not_found'] } } },
    async (req, reply) => {
      if (!oidc)
        throw new AppError('not_found', 'Sign-in through an OpenID Connect provider is not configured');
      const state = secret();
      let url: string;
      try {
        const begun = await oidc.begin(state);
        await sessions.beginSignIn(state, begun.pending);
        url = begun.url;
      } catch (err) {
        if (!(err instanceof SignInFailed)) throw err;
        return reply.redirect(`/?signin=${err.reason}`, 303);
      }
      return reply
        .header('set-cookie', stateCookie(req, config.baseUrl, state, OIDC_SIGN_IN_TTL_SECONDS))
        .header('cache-control', 'no-store')
        .redirect(url, 303);
    },
  );

  app.get(
    '/v1/auth/oidc/callback',
    {
      config: { auth: 'none' },
      schema: {
        // Read leniently: whatever comes back, the person is sent to a page (see LinkQuery).
        querystring: LinkQuery,
        response: Redirect,
        // 404 while no provider is configured.
        documented: { errors: ['not_found'] },
      },
    },
    async (req, reply) => {
      if (!oidc)
        throw new AppError('not_found', 'Sign-in through an OpenID Connect provider is not configured');
      const state = oneParam(req.query.state);
      // The state must be the one this browser was sent off with (its cookie), and not used before.
      const pending =
        state !== undefined && readCookie(req, OIDC_STATE_COOKIE) === state
          ? await sessions.takeSignIn(state)
          : null;
      // The state cookie has served its purpose whatever happens next.
      reply.header('cache-control', 'no-store').header('set-cookie', stateCookie(req, config.baseUrl, '', 0));
      if (!pending || state === undefined) {
        req.log.info('OpenID sign-in callback without a matching sign-in under way');
        return reply.redirect('/?signin=invalid', 303);
      }
      let userId: string;
      try {
        userId = await oidc.finish(new URL(req.url, config.baseUrl), state, pending);
      } catch (err) {
        if (!(err instanceof SignInFailed)) throw err;
        req.log.warn({ reason: err.reason, err: err.message }, 'OpenID sign-in failed');
        return reply.redirect(`/?signin=${err.reason}`, 303);
      }
      const opened = await sessions.open(userId);
      req.log.info({ userId }, 'dashboard session opened through the OpenID provider');
      return reply
        .header('set-cookie', setSessionCookie(req, config.baseUrl, opened.sessionId, SESSION_TTL_SECONDS))
        .redirect('/', 303);
    },
  );

  app.get(
    '/v1/auth/login',
    {
      config: { auth: 'none' },
      schema: {
        querystring: LinkQuery,
        response: {
          303: Type.Null({
            description:
              'To the dashboard (`/`) with the session cookie set, or to `/?signin=invalid` when the link is unknown, used or expired.',
          }),
        },
      },
    },
    async (req, reply) => {
      const token = oneParam(req.query.token);
      const opened = token === undefined ? null : await sessions.redeem(token);
      // A person followed this link in a browser: send them to a page, not to a JSON error.
      if (!opened) return reply.redirect('/?signin=invalid', 303);
      req.log.info({ userId: opened.userId }, 'dashboard session opened with a login link');
      return reply
        .header('set-cookie', setSessionCookie(req, config.baseUrl, opened.sessionId, SESSION_TTL_SECONDS))
        .header('cache-control', 'no-store')
        .redirect('/', 303);
    },
  );

  app.get(
    '/v1/auth/session',
    { config: { auth: 'jwt' }, schema: { response: { 200: SessionSchema } } },
    async (req, reply) => {
      const p = req.principal;
      if (p?.kind !== 'user' || !p.session) {
        throw new AppError('unauthorized', 'No dashboard session: this endpoint reads the session cookie');
      }
      reply.header('cache-control', 'no-store');
      return { userId: p.userId, csrfToken: p.session.csrfToken, expiresAt: p.session.expiresAt };
    },
  );

  app.post(
    '/v1/auth/logout',
    {
      config: { auth: 'jwt' },
      schema: {
        documented: { body: NoBody },
        response: {
          204: Type.Null({
            description:
              'The session the cookie names is ended, also when a bearer token authenticated the request, and the cookie cleared. A bearer token without the cookie ends nothing (user tokens are not revoked) and gets the same answer',
          }),
        },
      },
    },
    async (req, reply) => {
      // Only a user gets here: a bearer token (which takes precedence over the cookie for who the
      // caller is) or the cookie itself, whose CSRF token authentication checked. Either way signing
      // out must not leave the cookie's session usable, so the session the cookie names ends.
      const cookie = sessionCookie(req);
      if (cookie) await sessions.end(cookie);
      return reply.header('set-cookie', clearSessionCookie(req, config.baseUrl)).code(204).send(null);
    },
  );
};
