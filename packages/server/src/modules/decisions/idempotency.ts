import type { Static } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { AppError, invalid } from '../../lib/errors.js';
import {
  type Claim,
  type IdempotencyErrors,
  idempotencyHooks,
  idempotencyKeyHeader,
} from '../../lib/idempotency.js';
import { createIdempotencyStore } from '../../lib/idempotency-store.js';
import { derivedUuidv7 } from '../../lib/ids.js';
import type { DecisionRepository } from './repository.js';
import type { LogResponse } from './schemas.js';

/** The decision log's keys are stored as `decisions:<project id>/<key>`, apart from the gateway's. */
const SURFACE = 'decisions:';

/**
 * How often an organization's expired keys are deleted. The SDK sends a new key with every batch, so
 * without it the table would keep a row per batch long after the 24 hours in which it can replay.
 */
const SWEEP_EVERY_MS = 10 * 60_000;

/** "message; hint" as one sentence of envelope A, which has no hint member. */
const sentence = (message: string, hint: string | null) =>
  `${message.charAt(0).toUpperCase()}${message.slice(1)}${hint ? `; ${hint}` : ''}`;

const ERRORS_A: IdempotencyErrors = {
  invalidKey: (message, hint) => invalid(sentence(message, hint)),
  reused: (message, hint) =>
    new AppError('idempotency_key_reused_with_different_payload', sentence(message, hint)),
  inProgress: (message, hint) => new AppError('idempotency_request_in_progress', sentence(message, hint)),
};

/** The header as the API document shows it on POST /v1/decisions. */
export const IdempotencyKeyHeader = idempotencyKeyHeader(
  'Makes a retry safe: the same key with the same body replays the first answer (same ids, header ' +
    'idempotent-replayed: true) for 24 hours and records nothing again; with another body it answers ' +
    '400 idempotency_key_reused_with_different_payload, and while the first request runs 409 ' +
    'idempotency_request_in_progress. Keys are per project. 1-255 printable ASCII characters, not ' +
    'starting or ending with a space. The SDK sends one per batch.',
);

/** The codes the header adds to the route's answers. */
export const IDEMPOTENCY_ERRORS = [
  'idempotency_key_reused_with_different_payload',
  'idempotency_request_in_progress',
] as const;

/**
 * The ids of the decisions a request records under an Idempotency-Key claim, in body order: derived
 * from the organization, the key and the time the key's current request was first claimed (the
 * claim's own time, or the one a takeover kept from the claim it took over), so they are the same for
 * whoever reads the claim and for every takeover of it, and no other request (nor a later one with the
 * same key, once the key was answered or freed) gives them. A request taken over while it still waits
 * for the store (on another instance) and the request that took it over record the same ids: the
 * decisions' primary key refuses the second commit, whichever it is.
 */
export function claimedDecisionIds(claim: Claim, count: number): string[] {
  const ms = Date.parse(claim.originAt);
  const seed = `${claim.org}\n${claim.key}\n${claim.originAt}`;
  return Array.from({ length: count }, (_, i) => derivedUuidv7(ms, seed, i));
}

/** The 201 of POST /v1/decisions: the ids of a batch, or the id of a single decision. */
type LogAnswer = Static<typeof LogResponse>;

/**
 * Idempotency-Key on POST /v1/decisions (lib/idempotency.ts), answered in envelope A: the hooks to
 * install on the route, and `recorded`. They run after the route's preValidation and body validation.
 *
 * A claim left unanswered past the stale age is first looked up: its decisions, recorded in one
 * transaction under ids derived from the claim, are either all in the log or none are. If they are
 * (the process died after the commit, or the answer could not be stored), the 201 that request would
 * have sent is stored and replayed, and nothing is recorded again; if not, the claim is taken over,
 * and the request records them under the same ids.
 */
export function decisionLogIdempotency(
  ctx: Pick<AppContext, 'store' | 'scope' | 'clock'>,
  decisions: Pick<DecisionRepository, 'get'>,
) {
  /**
   * The 201 a request with this body under this claim answers, if its decisions are in the log (all
   * of them: a batch is committed in one transaction), or null.
   */
  async function recorded(claim: Claim, body: unknown): Promise<LogAnswer | null> {
    const batch = Array.isArray(body);
    const ids = claimedDecisionIds(claim, batch ? body.length : 1);
    if (!(await decisions.get(claim.org, ids[0]!))) return null;
    return batch ? { success: true, ids } : { success: true, id: ids[0]! };
  }

  const hooks = idempotencyHooks({
    store: createIdempotencyStore(ctx.store.db),
    scope: ctx.scope,
    clock: ctx.clock,
    errors: ERRORS_A,
    surface: SURFACE,
    sweepEveryMs: SWEEP_EVERY_MS,
    recover: async (req, claim) => {
      const answer = await recorded(claim, req.body);
      return answer && { status: 201, response: JSON.stringify(answer) };
    },
  });
  return { ...hooks, recorded };
}
