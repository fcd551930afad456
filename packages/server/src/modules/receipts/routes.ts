import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { intParam } from '../decisions/query.js';
import { EXPORT_PAGE, exportChunks, planExport } from './export.js';
import { createReceiptRepository } from './repository.js';

const ExportQuery = Type.Object({
  after: Type.Optional(Type.String({ description: 'sequence number; the export starts after it' })),
  limit: Type.Optional(Type.String({ description: 'integer 1-100000; default: the whole chain' })),
});

export const receiptRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const receipts = createReceiptRepository(ctx.store.db);

  app.get('/v1/receipts/export', { schema: { querystring: ExportQuery } }, async (req, reply) => {
    const scope = await ctx.scope(req);
    const after = intParam('after', req.query.after, 0, Number.MAX_SAFE_INTEGER - 1);
    const limit = intParam('limit', req.query.limit, 1, 100_000);
    const org = scope.organizationId;
    const plan = await planExport(receipts, org, after, limit);
    // The first page is read before answering, so a store failure is still a clean error response.
    const first =
      plan.from < plan.before
        ? await receipts.page(org, plan.from, plan.before, Math.min(EXPORT_PAGE, plan.before - plan.from))
        : [];
    reply.header('x-chain-length', String(plan.chainLength));
    if (plan.nextAfter !== null) reply.header('x-next-after', String(plan.nextAfter));
    const body = Readable.from(exportChunks(receipts, org, plan, first), { objectMode: false });
    body.on('error', (err) => req.log.error({ err }, 'receipt export failed mid-stream'));
    return reply.type('application/x-ndjson').send(body);
  });
};
