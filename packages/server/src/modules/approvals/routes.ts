import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { documentedPage, IdParams } from '../../lib/schemas.js';
import type { KeyScope } from '../api-keys/model.js';
import { intParam } from '../decisions/query.js';
import {
  ApprovalSchema,
  BatchResolveBody,
  BatchResultSchema,
  CreateApprovalBody,
  CreatedApproval,
  PendingApprovalSchema,
  ResolveBody,
  ResolvedListResponse,
  ResolvedQuery,
  ResolvedSchema,
} from './schemas.js';

/** An approver key reads what it is asked to decide; only it (or a user) resolves. */
const READ: readonly KeyScope[] = ['api', 'approvals:resolve'];
const RESOLVE: readonly KeyScope[] = ['approvals:resolve'];

/** The query as the API document describes it: the handler checks these bounds (intParam). */
const ResolvedQueryDocumented = Type.Object(documentedPage(200));

/** The service lives on ctx (validation opens and uses approvals too); this module serves and sweeps. */
export const approvalRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = ctx.approvals;
  service.startSweeper();
  app.addHook('onClose', async () => service.stopSweeper());

  app.post(
    '/v1/approvals',
    { schema: { body: CreateApprovalBody, response: { 201: CreatedApproval } } },
    async (req, reply) => {
      const { arguments: _args, ...created } = await service.create(await ctx.scope(req), req.body);
      return reply.code(201).send(created);
    },
  );

  app.get(
    '/v1/approvals/pending',
    {
      config: { scopes: READ },
      schema: { response: { 200: Type.Object({ data: Type.Array(PendingApprovalSchema) }) } },
    },
    async (req) => ({ data: await service.listPending(await ctx.scope(req)) }),
  );

  app.get(
    '/v1/approvals/resolved',
    {
      config: { scopes: READ },
      schema: {
        querystring: ResolvedQuery,
        response: { 200: ResolvedListResponse },
        documented: { querystring: ResolvedQueryDocumented },
      },
    },
    async (req) =>
      service.listResolved(
        await ctx.scope(req),
        intParam('limit', req.query.limit, 1, 200, 50),
        // Unbounded above as GET /v1/decisions' offset: a page past the end is empty, with the real total.
        intParam('offset', req.query.offset, 0, Number.MAX_SAFE_INTEGER, 0),
      ),
  );

  app.get(
    '/v1/approvals/:id',
    { config: { scopes: READ }, schema: { params: IdParams, response: { 200: ApprovalSchema } } },
    async (req) => service.get(await ctx.scope(req), req.params.id),
  );

  app.post(
    '/v1/approvals/:id/resolve',
    {
      config: { scopes: RESOLVE },
      schema: {
        params: IdParams,
        body: ResolveBody,
        response: { 200: ResolvedSchema },
        // 410 expired: the approval passed its expiresAt before anyone resolved it.
        documented: { errors: ['expired'] },
      },
    },
    async (req) => service.resolve(await ctx.scope(req), req.params.id, req.body.action, req.body.resolvedBy),
  );

  app.post(
    '/v1/approvals/batch-resolve',
    {
      config: { scopes: RESOLVE },
      schema: {
        body: BatchResolveBody,
        response: { 200: Type.Object({ results: Type.Array(BatchResultSchema) }) },
      },
    },
    async (req) => ({
      results: await service.batchResolve(
        await ctx.scope(req),
        req.body.ids,
        req.body.action,
        req.body.resolvedBy,
      ),
    }),
  );
};
