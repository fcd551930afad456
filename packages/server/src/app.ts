import { randomUUID } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { MAX_BODY_BYTES } from '@svc/policy-engine';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import type { AppContext } from './context.js';
import { createEnforcement } from './enforcement/pipeline.js';
import { MemorySessionCounters } from './enforcement/session-counters.js';
import { enforcementSteps } from './enforcement/steps/index.js';
import { LocalEventBus } from './events/bus.js';
import { EventHub } from './events/hub.js';
import type { StreamOptions } from './events/options.js';
import { requestLogFields } from './events/redact.js';
import { eventRoutes } from './events/routes.js';
import { Checkpointer } from './ledger/checkpoints.js';
import { DecisionWriter } from './ledger/writer.js';
import { type Clock, systemClock } from './lib/clock.js';
import { createJwtVerifier, resolveJwtSecret } from './lib/jwt.js';
import { validatorCompiler } from './lib/schemas.js';
import { createScopeResolver } from './lib/scope.js';
import { countEvents, countRateLimits } from './metrics/observe.js';
import { createMetrics } from './metrics/registry.js';
import { registerMetrics } from './metrics/routes.js';
import { adminRoutes } from './modules/admin/routes.js';
import { ApiKeyAuthenticator } from './modules/api-keys/authenticator.js';
import { apiKeyRoutes } from './modules/api-keys/routes.js';
import { createApprovalRepository } from './modules/approvals/repository.js';
import { approvalRoutes } from './modules/approvals/routes.js';
import { createApprovalService } from './modules/approvals/service.js';
import { budgetRoutes } from './modules/budgets/routes.js';
import { charterRoutes } from './modules/charter/routes.js';
import { decisionRoutes } from './modules/decisions/routes.js';
import { healthRoutes } from './modules/health/routes.js';
import { createJudge } from './modules/llm-judge/judge.js';
import { mcpRoutes } from './modules/mcp/routes.js';
import { createOrganizationRepository } from './modules/organizations/repository.js';
import { organizationRoutes } from './modules/organizations/routes.js';
import { paymentRoutes } from './modules/payments/routes.js';
import { PolicyCache } from './modules/policies/cache.js';
import { createPolicyRepository } from './modules/policies/repository.js';
import { policyRoutes } from './modules/policies/routes.js';
import { policyDraftRoutes } from './modules/policy-drafts/routes.js';
import { projectRoutes } from './modules/projects/routes.js';
import { receiptRoutes } from './modules/receipts/routes.js';
import { sessionRoutes } from './modules/sessions/routes.js';
import { createSessionService } from './modules/sessions/service.js';
import { signingKeyRoutes } from './modules/signing-keys/routes.js';
import { toolRoutes } from './modules/tools/routes.js';
import { validationRoutes } from './modules/validation/routes.js';
import { AdminAuthThrottle } from './plugins/admin-throttle.js';
import { registerAuth } from './plugins/auth.js';
import { DASHBOARD_DIR, dashboardIndex, dashboardRoutes } from './plugins/dashboard.js';
import {
  clientErrorHandler,
  frameworkErrors,
  MAX_PARAM_LENGTH,
  registerErrorHandling,
} from './plugins/errors.js';
import { registerOpenApi, registerReference } from './plugins/openapi.js';
import { MemoryRateLimiter, registerRateLimits } from './plugins/rate-limit.js';
import { connectScaleOut } from './scale/index.js';
import { openSigningKeys } from './signing/open.js';
import type { Store } from './storage/db.js';

export interface BuildOptions {
  config: Config;
  store: Store;
  clock?: Clock;
  logger?: boolean;
  /** Event stream heartbeats and buffer limit (defaults: 15 s, 30 s, 1 MiB). */
  streams?: Partial<StreamOptions>;
  /** The built dashboard (default packages/dashboard/dist); absent → the API only. */
  dashboardDir?: string;
}

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Builds the HTTP application on an open, migrated store. Closing the app closes nothing it did not open. */
export async function buildApp({
  config,
  store,
  clock = systemClock,
  logger = true,
  streams,
  dashboardDir = DASHBOARD_DIR,
}: BuildOptions): Promise<{
  app: FastifyInstance;
  ctx: AppContext;
}> {
  const app = Fastify({
    logger: logger ? { level: config.logLevel, serializers: { req: requestLogFields } } : false,
    // The SDK decides locally only calls whose record fits this limit: one constant for both.
    bodyLimit: MAX_BODY_BYTES,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkErrors(config.docsUrl),
    clientErrorHandler,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID_RE.test(given) ? given : randomUUID();
    },
    // Fastify's own 503 while closing is not in the error envelope: registerErrorHandling answers instead.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
  }).withTypeProvider<TypeBoxTypeProvider>();
  // TypeBox's, with string lengths counted in characters as JSON Schema counts them (lib/schemas.ts).
  app.setValidatorCompiler(validatorCompiler);

  // A callback hook, not an async one: it runs on every response, and costs no promise that way.
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id);
    done(null, payload);
  });

  // Once stopping, a request that still arrives (on a kept-alive connection that was busy) is refused
  // before anything runs (registerErrorHandling's first hook). The first preClose hook: no stream or
  // session closes before it is set.
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });

  const organizations = createOrganizationRepository(store.db);
  const keys = new ApiKeyAuthenticator(store, clock);
  const secret = await resolveJwtSecret(config, store);
  const jwt = createJwtVerifier(config, secret);
  // Before anything connects: a signing key file readable by others stops the start.
  const signing = await openSigningKeys(config, store, clock, app.log);
  // With SVC_REDIS_URL, events, rate limits, session counters and cache invalidations are shared.
  const scale = config.redisUrl ? await connectScaleOut(config, store, app.log) : null;
  try {
    const metrics = createMetrics();
    const events = countEvents(scale?.events ?? new LocalEventBus(), metrics);
    const policies = new PolicyCache(createPolicyRepository(store.db));
    const writer = new DecisionWriter(store, { log: app.log, thread: config.writerThread, metrics });
    const judge = createJudge({ settings: config.llm, now: () => clock.now().getTime() });
    // A policy change drops that policy's verdicts at once (new versions never hit old ones anyway).
    policies.onChange((org, tool) => judge.forget(org, tool));
    const approvals = createApprovalService({
      approvals: createApprovalRepository(store.db),
      writer,
      events,
      clock,
      log: app.log,
      tierOf: async (id) => (await organizations.get(id))?.tier ?? 'free',
    });
    const sessions = createSessionService({ db: store.db, clock, baseUrl: config.baseUrl });
    const ctx: AppContext = {
      config,
      store,
      clock,
      log: app.log,
      keys,
      scope: createScopeResolver((u, o) => organizations.roleOf(u, o)),
      events,
      policies,
      writer,
      enforcement: createEnforcement({
        policies,
        steps: enforcementSteps({
          approvals,
          sessions: scale?.sessions ?? new MemorySessionCounters(store),
          judge,
        }),
        writer,
        events,
        clock,
      }),
      judge,
      approvals,
      rateLimiter: countRateLimits(scale?.rateLimiter ?? new MemoryRateLimiter(), metrics),
      streams: new EventHub(events),
      redis: scale?.link ?? null,
      signing,
      checkpoints: new Checkpointer({
        db: store.db,
        signer: signing,
        clock,
        origin: config.baseUrl,
        intervalMs: config.checkpointIntervalMs,
        log: app.log,
      }),
      metrics,
      sessions,
    };
    metrics.trackStreams('sse', () => ctx.streams.clients('sse').length);
    metrics.trackStreams('ws', () => ctx.streams.clients('ws').length);

    registerErrorHandling(app, () => closing);
    registerAuth(app, {
      config,
      keys,
      jwt,
      sessions,
      adminThrottle: new AdminAuthThrottle({ limit: config.adminRefusalsPerMinute }),
      clock,
    });
    await registerOpenApi(app, config);
    registerRateLimits(app, { limiter: ctx.rateLimiter, clock });
    registerMetrics(app, metrics);
    await scale?.wire(app, { keys, policies, sessions });
    app.addHook('onReady', async () => ctx.checkpoints.start());
    app.addHook('onClose', async () => {
      // In-flight requests have drained; commit what they queued before the store closes.
      await writer.close();
      // Everything acknowledged is committed: sign the final tree heads before the store closes.
      await ctx.checkpoints.close();
      await keys.close();
      await ctx.rateLimiter.close();
      await ctx.events.close();
      await scale?.close();
    });

    await app.register(healthRoutes, { ctx });
    await app.register(organizationRoutes, { ctx });
    await app.register(projectRoutes, { ctx });
    await app.register(apiKeyRoutes, { ctx });
    await app.register(adminRoutes, { ctx });
    await app.register(signingKeyRoutes, { ctx });
    await app.register(toolRoutes, { ctx });
    await app.register(policyRoutes, { ctx });
    await app.register(validationRoutes, { ctx });
    await app.register(approvalRoutes, { ctx });
    await app.register(policyDraftRoutes, { ctx });
    await app.register(decisionRoutes, { ctx });
    await app.register(receiptRoutes, { ctx });
    await app.register(eventRoutes, { ctx, jwt, ...(streams ? { streams } : {}) });
    await app.register(mcpRoutes, { ctx });
    await app.register(budgetRoutes, { ctx });
    await app.register(paymentRoutes, { ctx, prefix: '/v1/gateway' });
    await app.register(charterRoutes, { ctx, dashboardPage: dashboardIndex(dashboardDir) });
    await app.register(sessionRoutes, { ctx });
    await app.register(dashboardRoutes, { dir: dashboardDir });
    // Last: its path must not be one a route above takes.
    await registerReference(app, config);
    return { app, ctx };
  } catch (err) {
    // Nothing else owns the Redis connections yet: close them, or the process would hang on them.
    await scale?.close().catch(() => {});
    throw err;
  }
}
