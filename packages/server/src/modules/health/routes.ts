import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../context.js';
import { sendError } from '../../plugins/errors.js';

export const healthRoutes: FastifyPluginAsync<{ ctx: AppContext }> = async (app, { ctx }) => {
  app.get(
    '/healthz',
    {
      config: { auth: 'none' },
      schema: {
        summary: 'The process serves',
        response: { 200: Type.Object({ status: Type.Literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' }),
  );

  const ReadySchema = {
    summary: 'The store (and Redis, when configured) answer',
    response: { 200: Type.Object({ status: Type.Literal('ready') }) },
  };
  app.get('/readyz', { config: { auth: 'none' }, schema: ReadySchema }, async (req, reply) => {
    try {
      await ctx.store.ping();
    } catch (err) {
      req.log.warn({ err }, 'store not ready');
      return sendError(reply, 'service_unavailable', 'The store is not answering');
    }
    try {
      // Scaled out, an instance cut off from Redis would refuse validations: take it out of rotation.
      await ctx.redis?.ping();
    } catch (err) {
      req.log.warn({ err }, 'redis not ready');
      return sendError(reply, 'service_unavailable', 'Redis is not answering');
    }
    return { status: 'ready' };
  });
};
