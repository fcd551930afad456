import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Value } from '@sinclair/typebox/value';
import { CAPSULE_PAYLOAD_SCHEMA } from '@svc/capsules';
import type { AppContext } from '../../context.js';
import { idempotencyKeyHeader } from '../../lib/idempotency.js';
import { NoBody, VersionNumber } from '../../lib/schemas.js';
import { receiptSweep } from '../../lib/sweep.js';
import { type DocumentedOnly, HANDLER_B, tableCodeB, withEnvelopeB } from '../../plugins/openapi.js';
import { ResolveBody, ResolvedSchema } from '../approvals/schemas.js';
import { createEconomicConfigRepository, createSpendLedger } from '../budgets/repository.js';
import { createHttpFetch } from '../mcp/http-fetch.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { registerEnvelopeB } from './errors.js';
import { flowError } from './flow-model.js';
import { flowRoutes, INVOICE_BODY_LIMIT, MAX_PROVIDER_TIMEOUT_MS } from './flow-routes.js';
import { registerIdempotency } from './idempotency.js';
import { createInvoiceRepository, createInvoiceService } from './invoices.js';
import { gatewayError, type PackContent } from './model.js';
import { createProviderService } from './providers.js';
import { createGatewayRepository } from './repository.js';
import {
  CapsuleAnswerSchema,
  CapsuleJsonSchema,
  ConsumeBody,
  IdParams,
  MintBody,
  PackAnswerSchema,
  PackBody,
  PackParams,
  PackQuery,
  PayeeAnswerSchema,
  PayeeBody,
} from './schemas.js';
import { createPaymentService } from './service.js';
import { createWorkflowService } from './workflows.js';

/** How often consumed capsules still owing their receipt are looked for. */
const RECEIPT_REPAIR_INTERVAL_MS = 60_000;

/** Bodies under the gateway are limited to 512 KB (SPEC §8). */
export const GATEWAY_BODY_LIMIT = 512 * 1024;

/** How long a payment in flight holds its capsule beyond its provider's timeout (then a retry may take it over). */
const PAYMENT_LEASE_MARGIN_MS = 30_000;

/**
 * How long an unanswered Idempotency-Key claim of the gateway holds its key: longer than a consume
 * can run (its provider's longest timeout and the payment's lease margin, plus a minute for the store
 * and the lock), so a retry with the key never runs beside the request still holding it.
 */
export const GATEWAY_STALE_CLAIM_MS = MAX_PROVIDER_TIMEOUT_MS + PAYMENT_LEASE_MARGIN_MS + 60_000;

/** What every gateway POST adds to the API document: the Idempotency-Key it takes (idempotency.ts) and its refusals. */
const IDEMPOTENT: DocumentedOnly = {
  headers: idempotencyKeyHeader(
    'Makes the POST idempotent: the same key with the same method, path and body replays the first ' +
      'answer (header idempotent-replayed: true) for 24 hours; with another request it answers 400 ' +
      'idempotency_key_reused_with_different_payload. 1-255 printable ASCII characters, not starting or ' +
      'ending with a space.',
  ),
  envelopeB: [
    gatewayError.invalidRequest,
    gatewayError.idempotencyReused,
    gatewayError.idempotencyInProgress,
  ],
};

/** A mint: every check of `service.mint` (pack, money, approval, invoice and workflow bindings, signing). */
const MINT_ERRORS = [
  gatewayError.packNotFound,
  gatewayError.packHashMismatch,
  gatewayError.precision,
  gatewayError.invoiceMissing,
  gatewayError.rail,
  gatewayError.payeeNotFound,
  gatewayError.held,
  gatewayError.hashMismatch,
  flowError.invoiceNotFound,
  flowError.invoiceMismatch,
  flowError.invoiceAlreadyConsumed,
  flowError.invoiceParseFailed,
  flowError.workflowNotFound,
  gatewayError.approvalsUnavailable,
  gatewayError.approvalRequired,
  gatewayError.dualControlRequired,
  gatewayError.approvalNotFound,
  gatewayError.approvalPayloadMismatch,
  gatewayError.approvalDenied,
  gatewayError.approvalExpired,
  gatewayError.approvalConsumed,
  HANDLER_B.signingKeyMissing,
];

/** A consume: the capsule, the drift checks, the pack, payee, invoice, workflow and caps, the provider. */
const CONSUME_ERRORS = [
  gatewayError.payloadInvalid,
  gatewayError.precision,
  gatewayError.signature,
  gatewayError.kidUnknown,
  gatewayError.expired,
  gatewayError.rail,
  gatewayError.hashMismatch,
  gatewayError.overCeiling,
  gatewayError.capsuleNotFound,
  gatewayError.consumed,
  gatewayError.revoked,
  gatewayError.replayed,
  gatewayError.packNotFound,
  gatewayError.packHashMismatch,
  gatewayError.payeeNotFound,
  gatewayError.held,
  gatewayError.quarantine,
  gatewayError.conditionFailed,
  gatewayError.evalError,
  gatewayError.overEntityCap,
  flowError.invoiceNotFound,
  flowError.invoiceMismatch,
  flowError.invoiceAlreadyConsumed,
  flowError.workflowNotFound,
  flowError.workflowInvalidTransition,
  flowError.paymentInProgress,
  flowError.paymentMismatch,
  flowError.providerUpstream,
  flowError.providerTimeout,
  flowError.providerRateLimited,
  flowError.credentialsKeyMissing,
  HANDLER_B.signingKeyMissing,
  // The consume committed but its receipt could not be written yet (it is repaired).
  gatewayError.unavailable,
];

/**
 * The payment-authorization gateway under /v1/gateway: policy packs, payees and spend capsules.
 * Encapsulated, so its envelope-B error handler, body limit and Idempotency-Key handling apply here only.
 */
export const paymentRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const repo = createGatewayRepository(ctx.store.db);
  const allowPrivate = ctx.config.mcpAllowPrivateUpstreams;
  const credentialsKey = ctx.config.providerCredentialsKey;
  // Provider endpoints obey the MCP upstream address guard, sockets included (DNS rebinding).
  const http = createHttpFetch({ allowPrivate });
  app.addHook('onClose', async () => http.close());
  const organizations = createOrganizationRepository(ctx.store.db);
  const ledger = createSpendLedger(ctx.store);
  const service = createPaymentService({
    repo,
    ledger,
    configs: createEconomicConfigRepository(ctx.store.db),
    writer: ctx.writer,
    approvals: ctx.approvals,
    events: ctx.events,
    store: ctx.store.db,
    transaction: (fn) => ctx.store.db.transaction().execute(fn),
    tierOf: async (id) => (await organizations.get(id))?.tier ?? 'free',
    signing: ctx.signing,
    clock: ctx.clock,
    issuer: ctx.config.baseUrl,
    log: ctx.log,
    flow: {
      client: { request: http.request, credentialsKey, allowPrivate },
      leaseMarginMs: PAYMENT_LEASE_MARGIN_MS,
    },
  });
  // Consumed capsules whose receipt write failed get it from a pass started with the server (which
  // does not wait for it to listen), then within a minute, or on read. Closing waits for a running
  // pass (ended after the receipt it is writing), so the store never closes under it.
  const sweep = receiptSweep({
    repair: (stop) => service.repairReceipts({ stop }),
    intervalMs: RECEIPT_REPAIR_INTERVAL_MS,
    what: 'capsule receipt repair sweep',
    log: ctx.log,
  });
  app.addHook('onReady', async () => sweep.start());
  app.addHook('onClose', () => sweep.close());
  app.addHook('onRoute', (route) => {
    // Invoice ingest declares its own (larger) limit; every other route gets the gateway's.
    route.bodyLimit = route.bodyLimit === INVOICE_BODY_LIMIT ? INVOICE_BODY_LIMIT : GATEWAY_BODY_LIMIT;
    // In the API document only: every error in envelope B, and the Idempotency-Key of every POST.
    route.schema = withEnvelopeB(route.schema, route.method === 'POST' ? IDEMPOTENT : {});
  });
  registerEnvelopeB(app, ctx.config.docsUrl);
  registerIdempotency(app, {
    db: ctx.store.db,
    scope: ctx.scope,
    clock: ctx.clock,
    staleClaimMs: GATEWAY_STALE_CLAIM_MS,
  });

  await app.register(flowRoutes, {
    ctx,
    services: {
      invoices: createInvoiceService({ repo: createInvoiceRepository(ctx.store.db), clock: ctx.clock }),
      workflows: createWorkflowService({
        store: ctx.store.db,
        clock: ctx.clock,
        packContent: async (org, packId) => {
          const row = await repo.latestPack(org, packId);
          if (!row) throw gatewayError.packNotFound(`policy pack ${packId} not found`, 'pack_id');
          return JSON.parse(row.content) as PackContent;
        },
      }),
      providers: createProviderService({
        store: ctx.store.db,
        clock: ctx.clock,
        credentialsKey,
        allowPrivate,
        // The consume's lock: a connection changes only between consumes' reads of it and their payments.
        locked: (org, fn) =>
          ledger.locked(
            org,
            () => ctx.clock.now().toISOString(),
            (tx) => fn(tx.db),
          ),
      }),
    },
  });

  /** Actions on one payee: no body, the payee as it is now. */
  const payeeAction = {
    params: IdParams,
    documented: { body: NoBody, envelopeB: [gatewayError.payeeNotFound] },
    response: { 200: PayeeAnswerSchema },
  };

  app.get(
    '/schemas/capsule.json',
    { config: { auth: 'none' }, schema: { response: { 200: CapsuleJsonSchema } } },
    async (_req, reply) => {
      reply.header('cache-control', 'public, max-age=3600');
      return CAPSULE_PAYLOAD_SCHEMA;
    },
  );

  app.put(
    '/packs/:packId',
    {
      schema: {
        params: PackParams,
        body: PackBody,
        response: { 201: PackAnswerSchema },
        // Packs are written by people (403 authorization_error for a key); saves racing for a version: 503.
        documented: { envelopeB: [gatewayError.precision, gatewayError.unavailable] },
      },
    },
    async (req, reply) => {
      reply.code(201);
      return service.putPack(await ctx.scope(req), req.params.packId, req.body);
    },
  );

  app.get(
    '/packs/:packId',
    {
      schema: {
        params: PackParams,
        querystring: PackQuery,
        response: { 200: PackAnswerSchema },
        documented: { envelopeB: [gatewayError.packNotFound] },
      },
    },
    async (req) => {
      const raw = req.query.version;
      const version = raw === undefined ? undefined : Number(raw);
      if (version !== undefined && !Value.Check(VersionNumber, version)) {
        throw gatewayError.invalidRequest(`version must be an integer from 1 to ${2 ** 31 - 1}`, 'version');
      }
      return service.getPack(await ctx.scope(req), req.params.packId, version);
    },
  );

  app.post(
    '/payees',
    { schema: { body: PayeeBody, response: { 200: PayeeAnswerSchema, 201: PayeeAnswerSchema } } },
    async (req, reply) => {
      const { payee, created } = await service.registerPayee(await ctx.scope(req), req.body.details);
      reply.code(created ? 201 : 200);
      return payee;
    },
  );

  app.get(
    '/payees/:id',
    {
      schema: {
        params: IdParams,
        response: { 200: PayeeAnswerSchema },
        documented: { envelopeB: [gatewayError.payeeNotFound] },
      },
    },
    async (req) => service.getPayee(await ctx.scope(req), req.params.id),
  );

  app.post('/payees/:id/hold', { schema: payeeAction }, async (req) =>
    service.holdPayee(await ctx.scope(req), req.params.id, true),
  );

  app.post('/payees/:id/release', { schema: payeeAction }, async (req) =>
    service.holdPayee(await ctx.scope(req), req.params.id, false),
  );

  app.post('/payees/:id/lift-quarantine', { schema: payeeAction }, async (req) =>
    service.liftQuarantine(await ctx.scope(req), req.params.id),
  );

  app.post(
    '/capsules',
    {
      schema: {
        body: MintBody,
        response: { 201: CapsuleAnswerSchema },
        documented: { envelopeB: MINT_ERRORS },
      },
    },
    async (req, reply) => {
      reply.code(201);
      return service.mint(await ctx.scope(req), req.body);
    },
  );

  app.post(
    '/capsules/consume',
    {
      schema: {
        body: ConsumeBody,
        response: { 200: CapsuleAnswerSchema },
        documented: { envelopeB: CONSUME_ERRORS },
      },
    },
    async (req) => service.consume(await ctx.scope(req), req.body),
  );

  app.post(
    '/approvals/:id/resolve',
    {
      config: { scopes: ['approvals:resolve'] },
      schema: {
        params: IdParams,
        body: ResolveBody,
        response: { 200: ResolvedSchema },
        documented: {
          envelopeB: [
            gatewayError.approvalNotFound,
            gatewayError.approvalResolved,
            gatewayError.approvalExpired,
            // Resolutions raced: send it again.
            tableCodeB('conflict'),
          ],
        },
      },
    },
    async (req) =>
      service.resolveApproval(await ctx.scope(req), req.params.id, req.body.action, req.body.resolvedBy),
  );

  app.get(
    '/capsules/:id',
    {
      schema: {
        params: IdParams,
        response: { 200: CapsuleAnswerSchema },
        documented: { envelopeB: [gatewayError.capsuleNotFound] },
      },
    },
    async (req) => service.getCapsule(await ctx.scope(req), req.params.id),
  );

  app.post(
    '/capsules/:id/revoke',
    {
      schema: {
        params: IdParams,
        response: { 200: CapsuleAnswerSchema },
        documented: {
          body: NoBody,
          envelopeB: [
            gatewayError.capsuleNotFound,
            gatewayError.consumed,
            flowError.paymentInProgress,
            flowError.paymentUnresolved,
          ],
        },
      },
    },
    async (req) => service.revoke(await ctx.scope(req), req.params.id),
  );
};
