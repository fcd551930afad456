import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { IdParams, Name, Nullable, OPTIONAL_BODY, Success } from '../../lib/schemas.js';
import { createApiKeyRepository } from '../api-keys/repository.js';
import { createApiKeyService } from '../api-keys/service.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { createProjectRepository } from './repository.js';
import { createProjectService } from './service.js';

const ProjectSchema = Type.Object({
  _id: Type.String(),
  organizationId: Type.String(),
  name: Type.String(),
  isDefault: Type.Boolean(),
  createdAt: Type.String(),
  updatedAt: Nullable(Type.String()),
});
// Optional in the schemas: without it (or X-Organization-Id) the scope answers 400 missing_organization.
const OrgRef = Type.Optional(Type.String({ maxLength: 200 }));

export const projectRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const projects = createProjectRepository(ctx.store.db);
  const apiKeys = createApiKeyRepository(ctx.store.db);
  const organizations = createOrganizationRepository(ctx.store.db);
  const apiKeyService = createApiKeyService({
    keys: apiKeys,
    authenticator: ctx.keys,
    clock: ctx.clock,
    projects,
  });
  const service = createProjectService({
    projects,
    apiKeys,
    apiKeyService,
    authenticator: ctx.keys,
    clock: ctx.clock,
    roleOf: (u, o) => organizations.roleOf(u, o),
  });

  app.get(
    '/v1/projects',
    {
      schema: {
        querystring: Type.Object({ organizationId: OrgRef }),
        response: { 200: Type.Object({ data: Type.Array(ProjectSchema) }) },
      },
    },
    async (req) => ({ data: await service.list(await ctx.scope(req, req.query.organizationId)) }),
  );

  app.post(
    '/v1/projects',
    {
      config: { auth: 'jwt' },
      schema: {
        body: Type.Object({ organizationId: OrgRef, name: Name }, { additionalProperties: false }),
        response: { 201: Type.Composite([ProjectSchema, Type.Object({ apiKey: Type.String() })]) },
      },
    },
    async (req, reply) => {
      const scope = await ctx.scope(req, req.body.organizationId);
      return reply.code(201).send(await service.create(scope, req.body.name));
    },
  );

  app.get(
    '/v1/projects/:id',
    { schema: { params: IdParams, response: { 200: ProjectSchema } } },
    async (req) => service.getById(req.principal!, req.params.id),
  );

  app.put(
    '/v1/projects/:id',
    {
      config: { auth: 'jwt' },
      schema: {
        params: IdParams,
        body: Type.Object({ organizationId: OrgRef, name: Name }, { additionalProperties: false }),
        response: { 200: ProjectSchema },
      },
    },
    async (req) => {
      const scope = await ctx.scope(req, req.body.organizationId);
      return service.rename(scope, req.params.id, req.body.name);
    },
  );

  app.delete(
    '/v1/projects/:id',
    {
      config: { auth: 'jwt' },
      schema: {
        params: IdParams,
        querystring: Type.Object({ organizationId: OrgRef }),
        response: { 200: Success },
      },
    },
    async (req) => {
      const scope = await ctx.scope(req, req.query.organizationId);
      await service.delete(scope, req.params.id);
      return { success: true as const };
    },
  );

  app.post(
    '/v1/projects/:id/regenerate-key',
    {
      config: { auth: 'jwt' },
      schema: {
        params: IdParams,
        // Optional in /openapi.json too (the preValidation hook below reads no body as {}).
        body: Type.Object({ organizationId: OrgRef }, { additionalProperties: false, [OPTIONAL_BODY]: true }),
        response: { 200: Type.Object({ apiKey: Type.String() }) },
      },
      // The body is optional (the organization may come from X-Organization-Id): none reads as {}.
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req) => {
      const scope = await ctx.scope(req, req.body.organizationId);
      return service.regenerateKey(scope, req.params.id);
    },
  );
};
