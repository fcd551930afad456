import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { CAPSULE_PAYLOAD_SCHEMA } from '@svc/capsules';
import type { AppContext } from '../../context.js';
import { createEconomicConfigRepository, createSpendLedger } from '../budgets/repository.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { registerEnvelopeB } from './errors.js';
import { registerIdempotency } from './idempotency.js';
import { createGatewayRepository } from './repository.js';
import { ConsumeBody, IdParams, MintBody, PackBody, PackParams, PackQuery, PayeeBody } from './schemas.js';
import { createPaymentService } from './service.js';

/** Bodies under the gateway are limited to 512 KB (SPEC §8). */
export const GATEWAY_BODY_LIMIT = 512 * 1024;

/**
 * The payment-authorization gateway under /v1/gateway: policy packs, payees and spend capsules.
 * Encapsulated, so its envelope-B error handler, body limit and Idempotency-Key handling apply here only.
 */
export const paymentRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const repo = createGatewayRepository(ctx.store.db);
  const organizations = createOrganizationRepository(ctx.store.db);
  const service = createPaymentService({
    repo,
    ledger: createSpendLedger(ctx.store),
    configs: createEconomicConfigRepository(ctx.store.db),
    writer: ctx.writer,
    approvals: ctx.approvals,
    store: ctx.store.db,
    transaction: (fn) => ctx.store.db.transaction().execute(fn),
    tierOf: async (id) => (await organizations.get(id))?.tier ?? 'free',
    signing: ctx.signing,
    clock: ctx.clock,
    issuer: ctx.config.baseUrl,
    log: ctx.log,
  });
  app.addHook('onRoute', (route) => {
    route.bodyLimit = GATEWAY_BODY_LIMIT;
  });
  registerEnvelopeB(app, ctx.config.docsUrl);
  registerIdempotency(app, { repo, scope: ctx.scope, clock: ctx.clock });

  app.get('/schemas/capsule.json', { config: { auth: 'none' } }, async (_req, reply) => {
    reply.header('cache-control', 'public, max-age=3600');
    return CAPSULE_PAYLOAD_SCHEMA;
  });

  app.put('/packs/:packId', { schema: { params: PackParams, body: PackBody } }, async (req, reply) => {
    reply.code(201);
    return service.putPack(await ctx.scope(req), req.params.packId, req.body);
  });

  app.get('/packs/:packId', { schema: { params: PackParams, querystring: PackQuery } }, async (req) =>
    service.getPack(await ctx.scope(req), req.params.packId, req.query.version),
  );

  app.post('/payees', { schema: { body: PayeeBody } }, async (req, reply) => {
    const { payee, created } = await service.registerPayee(await ctx.scope(req), req.body.details);
    reply.code(created ? 201 : 200);
    return payee;
  });

  app.get('/payees/:id', { schema: { params: IdParams } }, async (req) =>
    service.getPayee(await ctx.scope(req), req.params.id),
  );

  app.post('/payees/:id/hold', { schema: { params: IdParams } }, async (req) =>
    service.holdPayee(await ctx.scope(req), req.params.id, true),
  );

  app.post('/payees/:id/release', { schema: { params: IdParams } }, async (req) =>
    service.holdPayee(await ctx.scope(req), req.params.id, false),
  );

  app.post('/payees/:id/lift-quarantine', { schema: { params: IdParams } }, async (req) =>
    service.liftQuarantine(await ctx.scope(req), req.params.id),
  );

  app.post('/capsules', { schema: { body: MintBody } }, async (req, reply) => {
    reply.code(201);
    return service.mint(await ctx.scope(req), req.body);
  });

  app.post('/capsules/consume', { schema: { body: ConsumeBody } }, async (req) =>
    service.consume(await ctx.scope(req), req.body),
  );

  app.get('/capsules/:id', { schema: { params: IdParams } }, async (req) =>
    service.getCapsule(await ctx.scope(req), req.params.id),
  );

  app.post('/capsules/:id/revoke', { schema: { params: IdParams } }, async (req) =>
    service.revoke(await ctx.scope(req), req.params.id),
  );
};
