import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { BUDGET_SCOPES } from '@svc/policy-engine';
import type { AppContext } from '../../context.js';
import { receiptSweep } from '../../lib/sweep.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { micros } from './config.js';
import { createSpendReceipts } from './receipts.js';
import { createEconomicConfigRepository, createSpendLedger } from './repository.js';
import {
  AuthorizationSchema,
  AuthorizeBody,
  CommitBody,
  CommitSchema,
  ConfigBody,
  ConfigSchema,
  StatusBody,
  StatusSchema,
} from './schemas.js';
import { createBudgetService } from './service.js';

/** How often each process chains the receipts actions still owe (also once at startup). */
const RECEIPT_REPAIR_INTERVAL_MS = 60_000;

/** The economic API (SPEC §4 Economic): spend authorization on the organization's spend ledger. */
export const budgetRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const organizations = createOrganizationRepository(ctx.store.db);
  const service = createBudgetService({
    ledger: createSpendLedger(ctx.store),
    configs: createEconomicConfigRepository(ctx.store.db),
    receipts: createSpendReceipts(ctx.writer),
    events: ctx.events,
    clock: ctx.clock,
    log: ctx.log,
    tierOf: async (id) => (await organizations.get(id))?.tier ?? 'free',
  });
  // Authorizations and commits whose receipt write failed, or whose process died before it, get it
  // from a pass started with the server (which does not wait for it to listen) and then within a
  // minute, whether or not the client sends the request again.
  const sweep = receiptSweep({
    repair: (stop) => service.repairReceipts({ stop }),
    intervalMs: RECEIPT_REPAIR_INTERVAL_MS,
    what: 'spend receipt repair sweep',
    log: ctx.log,
  });
  app.addHook('onReady', async () => sweep.start());
  app.addHook('onClose', () => sweep.close());

  app.get('/v1/economic/config', { schema: { response: { 200: ConfigSchema } } }, async (req) =>
    service.config(await ctx.scope(req)),
  );

  app.put(
    '/v1/economic/config',
    { schema: { body: ConfigBody, response: { 200: ConfigSchema } } },
    async (req) => service.putConfig(await ctx.scope(req), req.body),
  );

  app.post(
    '/v1/economic/authorize',
    { schema: { body: AuthorizeBody, response: { 200: AuthorizationSchema } } },
    async (req) => {
      const b = req.body;
      const metadata = b.metadata ?? {};
      const quoteMicros = micros('body/estimatedSpendUsd', b.estimatedSpendUsd)!;
      const scopes = b.budgetScopes ?? BUDGET_SCOPES;
      return service.authorize(await ctx.scope(req), {
        actionId: b.actionId,
        sessionId: b.sessionId,
        agentId: b.agentId,
        toolName: b.toolName,
        category: b.category,
        payer: b.payer ?? null,
        mode: b.mode ?? 'live',
        quoteMicros,
        // Without a maximum the quote itself is the most the caller accepts.
        maxAcceptableMicros: micros('body/maxAcceptableSpendUsd', b.maxAcceptableSpendUsd) ?? quoteMicros,
        budgetScopes: BUDGET_SCOPES.filter((s) => scopes.includes(s)),
        metadata,
        approvalId: b.approvalId ?? null,
      });
    },
  );

  app.post(
    '/v1/economic/commit',
    { schema: { body: CommitBody, response: { 200: CommitSchema } } },
    async (req) => {
      const b = req.body;
      return service.commit(await ctx.scope(req), {
        actionId: b.actionId,
        sessionId: b.sessionId,
        agentId: b.agentId,
        toolName: b.toolName,
        category: b.category,
        payer: b.payer ?? null,
        quoteMicros: micros('body/quotedSpendUsd', b.quotedSpendUsd)!,
        actualMicros: micros('body/actualSpendUsd', b.actualSpendUsd)!,
        approvalId: b.approvalId ?? null,
      });
    },
  );

  app.post(
    '/v1/economic/status',
    { schema: { body: StatusBody, response: { 200: StatusSchema } } },
    async (req) => service.status(await ctx.scope(req), req.body),
  );
};
