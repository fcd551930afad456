import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { AppError, invalid } from '../../lib/errors.js';
import { ifMatchOf } from '../../lib/if-match.js';
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

/** The optional precondition of a write to one policy. */
const IfMatchHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'The ETag of the policy as read (GET /v1/policies/:toolName): if it is another version now, nothing is done and the answer is 409 conflict. `*` or no header: no precondition',
    }),
  ),
});

const ETAG = {
  type: 'string',
  description:
    'The version of the policy as an entity tag (`"v<version>-<hash>"`), for If-Match on PUT, DELETE, activate and deactivate; a policy deleted and created again gets a new one',
};

/** A response schema documented with the ETag header it carries. */
const withEtag = (schema: object) => ({ ...schema, headers: { ETag: ETAG } });

const etagHeader = (etag: string) => `"${etag}"`;

/**
 * Marks the 404 of a tool without a policy. Clients that allow such a tool's calls unchecked (the
 * SDK) read "no policy" only with it: every other 404 (an unknown route, as under a base URL with
 * a path of its own, or a proxy's page) carries the same `not_found` code but never this header.
 */
const NO_POLICY = { 'x-policy': 'none' };

const isNotFound = (err: unknown): err is AppError => err instanceof AppError && err.code === 'not_found';

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
    {
      schema: {
        params: PolicyParams,
        response: { 200: PolicyWithTool },
        documented: { response: { 200: withEtag(PolicyWithTool) } },
      },
    },
    async (req, reply) => {
      const scope = await ctx.scope(req);
      const { etag, ...policy } = await service.get(scope, req.params.toolName).catch((err: unknown) => {
        throw isNotFound(err) ? new AppError('not_found', err.message, NO_POLICY) : err;
      });
      reply.header('etag', etagHeader(etag));
      return policy;
    },
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
      const version = intParam('params/version', req.params.version, 1, 2 ** 31 - 1)!;
      return service.version(await ctx.scope(req), req.params.toolName, version, req.query.policy_hash);
    },
  );

  app.post(
    '/v1/policies',
    {
      schema: {
        body: CreatePolicyBody,
        response: { 201: PolicyWithQuality },
        documented: { response: { 201: withEtag(PolicyWithQuality) } },
      },
    },
    async (req, reply) => {
      const { etag, ...policy } = await service.create(await ctx.scope(req), req.body);
      return reply.code(201).header('etag', etagHeader(etag)).send(policy);
    },
  );

  app.put(
    '/v1/policies/:toolName',
    {
      schema: {
        params: PolicyParams,
        headers: IfMatchHeaders,
        body: UpdatePolicyBody,
        response: { 200: PolicyWithQuality },
        documented: { response: { 200: withEtag(PolicyWithQuality) } },
      },
    },
    async (req, reply) => {
      const expected = ifMatchOf(req.headers['if-match'], 'the policy');
      const scope = await ctx.scope(req);
      const { etag, ...policy } = await service.update(scope, req.params.toolName, req.body, expected);
      reply.header('etag', etagHeader(etag));
      return policy;
    },
  );

  app.delete(
    '/v1/policies/:toolName',
    { schema: { params: PolicyParams, headers: IfMatchHeaders, response: { 200: Success } } },
    async (req) => {
      const expected = ifMatchOf(req.headers['if-match'], 'the policy');
      await service.delete(await ctx.scope(req), req.params.toolName, expected);
      return { success: true as const };
    },
  );

  for (const action of ['activate', 'deactivate'] as const) {
    app.post(
      `/v1/policies/:toolName/${action}`,
      {
        schema: {
          params: PolicyParams,
          headers: IfMatchHeaders,
          documented: { body: NoBody },
          response: { 200: PolicyMessage },
        },
      },
      async (req) => {
        const expected = ifMatchOf(req.headers['if-match'], 'the policy');
        const scope = await ctx.scope(req);
        const message = await service.setActive(scope, req.params.toolName, action === 'activate', expected);
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
