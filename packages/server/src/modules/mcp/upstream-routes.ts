import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { IdParams, NoBody, Success } from '../../lib/schemas.js';
import {
  CreateUpstreamBody,
  CreateUpstreamDocumented,
  ListQuery,
  TestResult,
  UpdateUpstreamBody,
  UpstreamSchema,
} from './schemas.js';
import type { UpstreamService } from './service.js';

/** Control plane: /v1/mcp/upstreams*, for users (JWT + X-Organization-Id) and API keys of the organization. */
export const upstreamRoutes: FastifyPluginAsyncTypebox<{
  ctx: AppContext;
  service: UpstreamService;
}> = async (app, { ctx, service }) => {
  app.get(
    '/v1/mcp/upstreams',
    {
      schema: {
        querystring: ListQuery,
        response: { 200: Type.Object({ data: Type.Array(UpstreamSchema) }) },
      },
    },
    async (req) => ({ data: await service.list(await ctx.scope(req), req.query.projectId) }),
  );

  app.post(
    '/v1/mcp/upstreams',
    {
      schema: {
        body: CreateUpstreamBody,
        response: { 201: UpstreamSchema },
        documented: { body: CreateUpstreamDocumented },
      },
    },
    async (req, reply) => reply.code(201).send(await service.create(await ctx.scope(req), req.body)),
  );

  app.get(
    '/v1/mcp/upstreams/:id',
    { schema: { params: IdParams, response: { 200: UpstreamSchema } } },
    async (req) => service.get(await ctx.scope(req), req.params.id),
  );

  app.patch(
    '/v1/mcp/upstreams/:id',
    { schema: { params: IdParams, body: UpdateUpstreamBody, response: { 200: UpstreamSchema } } },
    async (req) => service.update(await ctx.scope(req), req.params.id, req.body),
  );

  app.delete(
    '/v1/mcp/upstreams/:id',
    { schema: { params: IdParams, response: { 200: Success } } },
    async (req) => {
      await service.delete(await ctx.scope(req), req.params.id);
      return { success: true as const };
    },
  );

  app.post(
    '/v1/mcp/upstreams/:id/test',
    { schema: { params: IdParams, documented: { body: NoBody }, response: { 200: TestResult } } },
    async (req) => service.test(await ctx.scope(req), req.params.id),
  );
};
