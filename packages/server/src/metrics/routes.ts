import type { FastifyInstance } from 'fastify';
import type { Metrics } from './model.js';

/** The validation routes whose latency is measured. */
const VALIDATE_ROUTES = new Set(['/v1/tools/validate', '/v1/validate']);

/**
 * GET /metrics (Prometheus text format) behind the operator admin token, and the validate latency
 * hook. Registered on the root instance so the hook sees every route.
 */
export function registerMetrics(app: FastifyInstance, metrics: Metrics): void {
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url;
    if (route && VALIDATE_ROUTES.has(route))
      metrics.validateLatency(route, reply.statusCode, reply.elapsedTime / 1000);
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
