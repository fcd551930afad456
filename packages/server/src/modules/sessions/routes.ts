import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { AppError } from '../../lib/errors.js';
import { clearSessionCookie, setSessionCookie } from './cookie.js';
import { SESSION_TTL_SECONDS } from './model.js';

const SessionSchema = Type.Object({
  userId: Type.String(),
  csrfToken: Type.String(),
  expiresAt: Type.String(),
});

/** Dashboard sign-in: a login link opens a cookie session; the SPA reads it back and signs out. */
export const sessionRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const { sessions, config } = ctx;

  app.get(
    '/v1/auth/login',
    {
      config: { auth: 'none' },
      schema: { querystring: Type.Object({ token: Type.String({ maxLength: 200 }) }) },
    },
    async (req, reply) => {
      const opened = await sessions.redeem(req.query.token);
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

  app.post('/v1/auth/logout', { config: { auth: 'jwt' } }, async (req, reply) => {
    const p = req.principal;
    if (p?.kind === 'user' && p.session) await sessions.end(p.session.id);
    return reply.header('set-cookie', clearSessionCookie(req, config.baseUrl)).code(204).send();
  });
};
