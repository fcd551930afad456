import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { invalid } from '../../lib/errors.js';
import { NoBody, Success } from '../../lib/schemas.js';
import { intParam } from '../decisions/query.js';
import { createToolRepository } from '../tools/repository.js';
import { dropNulls } from './model.js';
import { createPolicyRepository } from './repository.js';
import {
  CreatePolicyBody,
  PolicyMessage,
  PolicyParams,
  PolicySchema,
  PolicyVersionParams,
  PolicyVersionQuery,
  PolicyVersionSchema,
  PolicyWithQuality,
  PolicyWithTool,
  QualitySchema,
  UpdatePolicyBody,
  ValidatePolicyBody,
} from './schemas.js';
import { createPolicyService } from './service.js';

export const policyRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createPolicyService({
    db: ctx.store.db,
    policies: createPolicyRepository(ctx.store.db),
    tools: createToolRepository(ctx.store.db),
    cache: ctx.policies,
    events: ctx.events,
    clock: ctx.clock,
    judge: ctx.judge,
  });

  // The spec's "?" means optional or null: null-valued fields are treated as absent before validation.
  app.addHook('preValidation', async (req) => {
    if (req.body !== undefined) req.body = dropNulls(req.body);
  });

  app.get(
    '/v1/policies',
    { schema: { response: { 200: Type.Object({ data: Type.Array(PolicySchema) }) } } },
    async (req) => ({ data: await service.list(await ctx.scope(req)) }),
  );

  app.get(
    '/v1/policies/:toolName',
    { schema: { params: PolicyParams, response: { 200: PolicyWithTool } } },
    async (req) => service.get(await ctx.scope(req), req.params.toolName),
  );

  app.get(
    '/v1/policies/:toolName/versions',
    {
      schema: {
        params: PolicyParams,
        response: { 200: Type.Object({ data: Type.Array(PolicyVersionSchema) }) },
      },
    },
    async (req) => ({ data: await service.versions(await ctx.scope(req), req.params.toolName) }),
  );

  app.get(
    '/v1/policies/:toolName/versions/:version',
    {
      schema: {
        params: PolicyVersionParams,
        querystring: PolicyVersionQuery,
        response: { 200: PolicyVersionSchema },
      },
    },
    async (req) => {
      const version = intParam('version', req.params.version, 1, 2 ** 31 - 1)!;
      return service.version(await ctx.scope(req), req.params.toolName, version, req.query.policy_hash);
    },
  );

  app.post(
    '/v1/policies',
    { schema: { body: CreatePolicyBody, response: { 201: PolicyWithQuality } } },
    async (req, reply) => reply.code(201).send(await service.create(await ctx.scope(req), req.body)),
  );

  app.put(
    '/v1/policies/:toolName',
    { schema: { params: PolicyParams, body: UpdatePolicyBody, response: { 200: PolicyWithQuality } } },
    async (req) => service.update(await ctx.scope(req), req.params.toolName, req.body),
  );

  app.delete(
    '/v1/policies/:toolName',
    { schema: { params: PolicyParams, response: { 200: Success } } },
    async (req) => {
      await service.delete(await ctx.scope(req), req.params.toolName);
      return { success: true as const };
    },
  );

  for (const action of ['activate', 'deactivate'] as const) {
    app.post(
      `/v1/policies/:toolName/${action}`,
      { schema: { params: PolicyParams, documented: { body: NoBody }, response: { 200: PolicyMessage } } },
      async (req) => {
        const scope = await ctx.scope(req);
        const message = await service.setActive(scope, req.params.toolName, action === 'activate');
        return { success: true as const, message };
      },
    );
  }

  app.post(
    '/v1/policies/:toolName/validate',
    { schema: { params: PolicyParams, body: ValidatePolicyBody, response: { 200: QualitySchema } } },
    async (req) => {
      const scope = await ctx.scope(req);
      const { toolName, ...definition } = req.body;
      if (toolName !== undefined && toolName !== req.params.toolName) {
        throw invalid(`body/toolName "${toolName}" differs from the path's "${req.params.toolName}"`);
      }
      return service.validate(scope, req.params.toolName, definition);
    },
  );
};
