import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../context.js';
import { settlesWithin } from '../../lib/deadline.js';
import { sendError } from '../../plugins/errors.js';

/**
 * How long each readiness check (the store, Redis) may take. A dependency that does not answer in
 * time counts as down: a load balancer's probe gets its 503 well within its own timeout, instead of
 * waiting for the dependency (a partition would hold the probe for as long as it lasts).
 */
export const READY_TIMEOUT_MS = 2000;

export interface HealthOptions {
  ctx: Pick<AppContext, 'store' | 'redis'>;
  /** Each check's deadline (default READY_TIMEOUT_MS). */
  readyTimeoutMs?: number;
}

/** Resolves with null once `check` succeeds, with its error if it fails or is not done within `ms`. */
async function within(check: () => Promise<void>, ms: number, what: string): Promise<unknown> {
  try {
    return (await settlesWithin(Promise.resolve().then(check), ms))
      ? null
      : new Error(`${what} did not answer within ${ms} ms`);
  } catch (err) {
    return err ?? new Error(`${what} failed`);
  }
}

export const healthRoutes: FastifyPluginAsync<HealthOptions> = async (app, { ctx, readyTimeoutMs }) => {
  const deadline = readyTimeoutMs ?? READY_TIMEOUT_MS;
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
    // Both at once: the answer comes within one deadline, not one per dependency.
    const redis = ctx.redis;
    const [store, cache] = await Promise.all([
      within(() => ctx.store.ping(), deadline, 'the store'),
      redis ? within(() => redis.ping(), deadline, 'Redis') : null,
    ]);
    if (store) {
      req.log.warn({ err: store }, 'store not ready');
      return sendError(reply, 'service_unavailable', 'The store is not answering');
    }
    if (cache) {
      // Scaled out, an instance cut off from Redis would refuse validations: take it out of rotation.
      req.log.warn({ err: cache }, 'redis not ready');
      return sendError(reply, 'service_unavailable', 'Redis is not answering');
    }
    return { status: 'ready' };
  });
};
