import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { IdParams, Name, NoBody, Nullable, OneOf } from '../../lib/schemas.js';
import { createProjectRepository } from '../projects/repository.js';
import { KEY_SCOPES } from './model.js';
import { createApiKeyRepository } from './repository.js';
import { createApiKeyService } from './service.js';

const Scopes = Type.Array(OneOf(KEY_SCOPES), { minItems: 1, maxItems: KEY_SCOPES.length, uniqueItems: true });

const ApiKeySchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  keyPrefix: Type.String(),
  projectId: Nullable(Type.String()),
  scopes: Scopes,
  isRevoked: Type.Boolean(),
  lastUsedAt: Nullable(Type.String()),
  createdAt: Type.String(),
});

export const apiKeyRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createApiKeyService({
    keys: createApiKeyRepository(ctx.store.db),
    authenticator: ctx.keys,
    clock: ctx.clock,
    projects: createProjectRepository(ctx.store.db),
  });

  app.get(
    '/v1/api-keys',
    { schema: { response: { 200: Type.Object({ data: Type.Array(ApiKeySchema) }) } } },
    async (req) => ({ data: await service.list(await ctx.scope(req)) }),
  );

  app.post(
    '/v1/api-keys',
    {
      schema: {
        body: Type.Object(
          {
            name: Name,
            projectId: Type.String({ minLength: 1, maxLength: 200 }),
            scopes: Type.Optional(Scopes),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            id: Type.String(),
            name: Type.String(),
            key: Type.String(),
            keyPrefix: Type.String(),
            projectId: Type.String(),
            scopes: Scopes,
            createdAt: Type.String(),
            warning: Type.String(),
          }),
        },
      },
    },
    async (req, reply) => reply.code(201).send(await service.create(await ctx.scope(req), req.body)),
  );

  app.get(
    '/v1/api-keys/:id',
    { schema: { params: IdParams, response: { 200: ApiKeySchema } } },
    async (req) => service.get(await ctx.scope(req), req.params.id),
  );

  app.patch(
    '/v1/api-keys/:id',
    {
      schema: {
        params: IdParams,
        // Only the name changes: scopes, project or revocation sent here would be ignored silently.
        body: Type.Object({ name: Name }, { additionalProperties: false }),
        response: { 200: ApiKeySchema },
      },
    },
    async (req) => service.rename(await ctx.scope(req), req.params.id, req.body.name),
  );

  app.post(
    '/v1/api-keys/:id/revoke',
    {
      schema: {
        params: IdParams,
        documented: { body: NoBody },
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            message: Type.String(),
            id: Type.String(),
            isRevoked: Type.Literal(true),
          }),
        },
      },
    },
    async (req) => {
      await service.revoke(await ctx.scope(req), req.params.id);
      return {
        success: true as const,
        message: 'API key revoked',
        id: req.params.id,
        isRevoked: true as const,
      };
    },
  );

  app.delete(
    '/v1/api-keys/:id',
    { schema: { params: IdParams, response: { 200: Type.Object({ success: Type.Literal(true) }) } } },
    async (req) => {
      await service.delete(await ctx.scope(req), req.params.id);
      return { success: true as const };
    },
  );
};
