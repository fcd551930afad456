import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { IdParams } from '../../lib/schemas.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { OrganizationSchema } from '../organizations/schemas.js';
import { createOrganizationService, TIERS } from '../organizations/service.js';

/** Operator API for self-hosting: plan changes, guarded by SVC_ADMIN_TOKEN. */
export const adminRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createOrganizationService({
    organizations: createOrganizationRepository(ctx.store.db),
    keys: ctx.keys,
    clock: ctx.clock,
  });

  app.patch(
    '/v1/admin/organizations/:id',
    {
      config: { auth: 'admin' },
      schema: {
        params: IdParams,
        body: Type.Object(
          {
            tier: Type.Optional(Type.Union(TIERS.map((t) => Type.Literal(t)))),
            rateLimitPerMinute: Type.Optional(
              Type.Union([Type.Integer({ minimum: 1, maximum: 1_000_000 }), Type.Null()]),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: OrganizationSchema },
      },
    },
    async (req) => service.adminUpdate(req.params.id, req.body),
  );
};
