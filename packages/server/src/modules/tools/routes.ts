import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { Success } from '../../lib/schemas.js';
import { dropNulls } from '../policies/model.js';
import { createPolicyRepository } from '../policies/repository.js';
import { createToolRepository } from './repository.js';
import { RegisterBody, RegisterResponse, SyncBody, SyncResponse, ToolParams, ToolSchema } from './schemas.js';
import { createToolService, registerMessage } from './service.js';

// POST /v1/tools/validate belongs to the validation module; static routes win over /v1/tools/:name.
export const toolRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createToolService({
    db: ctx.store.db,
    tools: createToolRepository(ctx.store.db),
    policies: createPolicyRepository(ctx.store.db),
    cache: ctx.policies,
    events: ctx.events,
    clock: ctx.clock,
  });

  // The spec's "?" means optional or null: null-valued fields are treated as absent before validation.
  app.addHook('preValidation', async (req) => {
    if (req.body !== undefined) req.body = dropNulls(req.body);
  });

  app.post(
    '/v1/tools/register',
    { schema: { body: RegisterBody, response: { 200: RegisterResponse } } },
    async (req) => {
      const input = req.body.tools.map((t) => ({
        name: t.name,
        description: t.description,
        arguments: t.parameters,
      }));
      const result = await service.upsert(await ctx.scope(req), input);
      return {
        success: true as const,
        registered_tools: result.tools.map((t) => t.name),
        message: registerMessage(result),
      };
    },
  );

  app.post('/v1/tools/sync', { schema: { body: SyncBody, response: { 200: SyncResponse } } }, async (req) => {
    const result = await service.upsert(await ctx.scope(req), req.body.tools);
    return { synced: result.tools.length, tools: result.tools, policiesGenerated: result.generated.length };
  });

  app.get(
    '/v1/tools',
    { schema: { response: { 200: Type.Object({ data: Type.Array(ToolSchema) }) } } },
    async (req) => ({ data: await service.list(await ctx.scope(req)) }),
  );

  app.get('/v1/tools/:name', { schema: { params: ToolParams, response: { 200: ToolSchema } } }, async (req) =>
    service.get(await ctx.scope(req), req.params.name),
  );

  app.delete(
    '/v1/tools/:name',
    { schema: { params: ToolParams, response: { 200: Success } } },
    async (req) => {
      await service.delete(await ctx.scope(req), req.params.name);
      return { success: true as const };
    },
  );
};
