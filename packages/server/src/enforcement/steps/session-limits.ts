import { codePointLength, type FailedConstraint, mergeEvaluation } from '@svc/policy-engine';
import type { Hold, Step, StepResult, Verdict } from '../model.js';
import type { Reservation, SessionCounters } from '../session-counters.js';
import { verdictOf } from './constraints.js';

const SESSION_ID_REQUIRED: FailedConstraint = {
  parameter: 'context.session_id',
  constraint_type: 'required',
  expected: 'present',
  actual: 'absent',
  message: 'this policy has session limits; context.session_id is required',
};

/**
 * Why the call names no session: none given (absent, null or ""), or a session_id that is not a
 * string. Request bodies are never coerced, so 123 is not the session "123".
 */
function noSession(id: unknown): FailedConstraint {
  if (id === undefined || id === null || id === '') return SESSION_ID_REQUIRED;
  const actual = Array.isArray(id) ? 'array' : typeof id;
  return {
    parameter: 'context.session_id',
    constraint_type: 'type',
    expected: 'string',
    actual,
    message: `this policy has session limits; context.session_id must be a string (got ${actual})`,
  };
}

/**
 * The longest session id a counter is kept under, in characters, as for every other id. The counter
 * is stored under it in an index, and PostgreSQL cannot index a key of several KiB: such a call could
 * never be recorded there (SQLite would count it), so it is refused alike on every store.
 */
const MAX_SESSION_ID_LENGTH = 200;

function sessionIdTooLong(id: string): FailedConstraint | null {
  // A string of at most that many UTF-16 units has at most that many code points: no scan.
  if (id.length <= MAX_SESSION_ID_LENGTH) return null;
  const n = codePointLength(id);
  if (n <= MAX_SESSION_ID_LENGTH) return null;
  return {
    parameter: 'context.session_id',
    constraint_type: 'length',
    expected: { maxLength: MAX_SESSION_ID_LENGTH },
    actual: n,
    message: `this policy has session limits; context.session_id must be at most ${MAX_SESSION_ID_LENGTH} characters long (got ${n})`,
  };
}

function holdOf(reservation: Reservation): Hold {
  return {
    commit: () => reservation.settle(),
    // The tool already ran: the counted call was spent either way.
    release: (ran) => (ran ? reservation.settle() : reservation.release()),
  };
}

/**
 * maxCalls and cumulative limits of the session (context.session_id): check-and-count for an allowed
 * call, approved calls included. The count is held until the decision is durable. A call that would
 * need approval, in a named session, is checked without being counted: one its session refuses now is
 * denied rather than put to a person (as the policy engine merges them: a session failure turns
 * require_approval into deny); approved, it is checked and counted when it is made.
 */
export function sessionLimitsStep(sessions: SessionCounters): Step {
  return {
    name: 'session-limits',
    async run({ scope, call, policy, sessionId }, verdict): Promise<StepResult> {
      const sc = policy?.definition.sessionConstraints;
      const limited = !!sc && (sc.maxCalls !== undefined || (sc.cumulativeLimits?.length ?? 0) > 0);
      if (verdict.decision === 'deny' || !limited || !policy) return { verdict };
      // An llm policy's judgement was made: the refused call's receipt still binds it.
      const refuse = (failures: FailedConstraint[]): StepResult => ({
        verdict: {
          ...verdictOf(mergeEvaluation(verdict.evaluation, failures), policy),
          judge: verdict.judge ?? null,
        },
      });
      if (verdict.decision === 'require_approval') {
        // The session is named when the approved call is made; asked for without one, it is checked then.
        if (!sessionId) return { verdict };
        const tooLong = sessionIdTooLong(sessionId);
        if (tooLong) return refuse([tooLong]);
        const failures = await sessions.check(
          scope.organizationId,
          sessionId,
          call.toolName,
          sc,
          call.arguments,
        );
        return failures.length > 0 ? refuse(failures) : { verdict };
      }
      if (!sessionId) return refuse([noSession(call.context.session_id)]);
      const tooLong = sessionIdTooLong(sessionId);
      if (tooLong) return refuse([tooLong]);
      const reservation = await sessions.reserve(
        scope.organizationId,
        sessionId,
        call.toolName,
        sc,
        call.arguments,
      );
      if (reservation.failures.length > 0) return refuse(reservation.failures);
      const after = reservation.after;
      return {
        verdict: verdict satisfies Verdict,
        hold: holdOf(reservation),
        ...(after ? { session: { sessionId, calls: after.calls, cumulative: after.cumulative } } : {}),
      };
    },
  };
}
