import type { FastifyInstance } from 'fastify';
import type { Metrics } from './model.js';

const VALIDATE_ROUTE = '/v1/tools/validate';

/**
 * GET /metrics (Prometheus text format) behind the operator admin token, and the validate latency
 * hook. Registered on the root instance so the hook sees every route.
 */
export function registerMetrics(app: FastifyInstance, metrics: Metrics): void {
  app.addHook('onResponse', async (req, reply) => {
    if (req.routeOptions.url === VALIDATE_ROUTE)
      metrics.validateLatency(reply.elapsedTime / 1000, reply.statusCode);
  });

  app.get(
    '/metrics',
    {
      config: { auth: 'admin' },
      schema: {
        summary: 'Prometheus metrics of this process',
        description: 'Text exposition format 0.0.4. Needs the operator admin token (SVC_ADMIN_TOKEN).',
        response: {
          200: {
            description: 'Every metric of this process',
            content: { 'text/plain': { schema: { type: 'string' } } },
          },
        },
      },
    },
    async (_req, reply) => {
      const { contentType, body } = await metrics.render();
      return reply.type(contentType).send(body);
    },
  );
}
