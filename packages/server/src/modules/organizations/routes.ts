import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { IdParams, Success } from '../../lib/schemas.js';
import type { UserPrincipal } from '../../plugins/auth.js';
import { createOrganizationRepository } from './repository.js';
import { CreateOrganizationBody, OrganizationSchema, UpdateOrganizationBody } from './schemas.js';
import { createOrganizationService } from './service.js';

export const organizationRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createOrganizationService({
    organizations: createOrganizationRepository(ctx.store.db),
    keys: ctx.keys,
    clock: ctx.clock,
  });
  const user = (p: unknown) => p as UserPrincipal;

  app.get(
    '/v1/organizations',
    { schema: { response: { 200: Type.Object({ data: Type.Array(OrganizationSchema) }) } } },
    async (req) => ({ data: await service.list(req.principal!) }),
  );

  app.post(
    '/v1/organizations',
    {
      config: { auth: 'jwt' },
      schema: { body: CreateOrganizationBody, response: { 201: OrganizationSchema } },
    },
    async (req, reply) => reply.code(201).send(await service.create(user(req.principal).userId, req.body)),
  );

  app.get(
    '/v1/organizations/slug/:slug',
    {
      schema: {
        params: Type.Object({ slug: Type.String({ maxLength: 200 }) }),
        response: { 200: OrganizationSchema },
      },
    },
    async (req) => service.getBySlug(req.principal!, req.params.slug),
  );

  app.get(
    '/v1/organizations/:id',
    { schema: { params: IdParams, response: { 200: OrganizationSchema } } },
    async (req) => service.get(req.principal!, req.params.id),
  );

  app.put(
    '/v1/organizations/:id',
    {
      config: { auth: 'jwt' },
      schema: { params: IdParams, body: UpdateOrganizationBody, response: { 200: OrganizationSchema } },
    },
    async (req) => service.update(req.principal!, req.params.id, req.body ?? {}),
  );

  app.delete(
    '/v1/organizations/:id',
    { config: { auth: 'jwt' }, schema: { params: IdParams, response: { 200: Success } } },
    async (req) => {
      await service.delete(req.principal!, req.params.id);
      return { success: true as const };
    },
  );
};
