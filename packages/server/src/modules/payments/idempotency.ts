import type { FastifyInstance } from 'fastify';
import type { Clock } from '../../lib/clock.js';
import { type IdempotencyErrors, idempotencyHooks } from '../../lib/idempotency.js';
import { createIdempotencyStore } from '../../lib/idempotency-store.js';
import type { ScopeResolver } from '../../lib/scope.js';
import type { Db } from '../../storage/db.js';
import { gatewayError } from './model.js';

/** The refusals in envelope B, naming the header as `param`. */
const ERRORS_B: IdempotencyErrors = {
  invalidKey: (message, hint) => gatewayError.invalidRequest(message, 'Idempotency-Key', hint),
  reused: (message, hint) => gatewayError.idempotencyReused(message, 'Idempotency-Key', hint),
  inProgress: (message, hint) => gatewayError.idempotencyInProgress(message, 'Idempotency-Key', hint),
};

/**
 * Idempotency-Key on every POST of the gateway (lib/idempotency.ts: replay, 400 on another request,
 * 409 while the first runs, 24 hours), answered in envelope B. Its keys are stored without a surface
 * prefix, as they were before another route took keys. `staleClaimMs` is longer than a consume can
 * run (its provider's timeout and more), so no claim is taken over while its request still runs.
 */
export function registerIdempotency(
  app: FastifyInstance,
  deps: { db: Db; scope: ScopeResolver; clock: Clock; staleClaimMs: number },
): void {
  const hooks = idempotencyHooks({
    store: createIdempotencyStore(deps.db),
    scope: deps.scope,
    clock: deps.clock,
    errors: ERRORS_B,
    surface: '',
    staleClaimMs: deps.staleClaimMs,
  });
  app.addHook('preHandler', async (req, reply) => {
    if (req.method !== 'POST') return;
    return hooks.preHandler(req, reply);
  });
  app.addHook('onSend', hooks.onSend);
}
