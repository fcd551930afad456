import { buildEvaluation, failure, typeFailure } from './failures.js';
import { argumentReader, typeName } from './lookup.js';
import type {
  Evaluation,
  FailedConstraint,
  SessionConstraints,
  SessionIncrements,
  SessionState,
} from './types.js';

/**
 * Floating-point sums drift (0.1 + 0.2 > 0.3), which would deny a call that lands exactly on the limit.
 * A total within this relative tolerance of the limit counts as on it. Relative only: under a limit of 0
 * any positive total is over, and a small limit gets a proportionally small tolerance. Same arithmetic
 * everywhere, so the server and the SDK still agree.
 */
const RELATIVE_TOLERANCE = 1e-9;

function over(total: number, limit: number): boolean {
  return total - limit > RELATIVE_TOLERANCE * Math.abs(limit);
}

function limitsOf(sc: SessionConstraints | null | undefined) {
  return sc?.cumulativeLimits ?? [];
}

/**
 * What this call adds to the session if it goes through: one call, plus the value of each argument under
 * a cumulative limit when that value is a finite number of 0 or more (anything else is denied by
 * evaluateSession, so it never counts).
 */
export function sessionIncrements(
  sc: SessionConstraints | null | undefined,
  args: Record<string, unknown>,
): SessionIncrements {
  const cumulative: Record<string, number> = {};
  for (const { argumentName } of limitsOf(sc)) {
    const v = args ? argumentReader(argumentName)(args) : undefined;
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) cumulative[argumentName] = v;
  }
  return { calls: 1, cumulative };
}

/**
 * Session failures for this call, given the usage BEFORE it. `maxCalls: 10` allows calls 1..10; a
 * cumulative limit fails when before + value > maxValue. Absent arguments add nothing; null, strings
 * and other non-numbers fail closed (`type`); a negative value would lower the running total, so it
 * fails too (`range`). Every session failure means deny.
 */
export function evaluateSession(
  sc: SessionConstraints | null | undefined,
  state: SessionState,
  args: Record<string, unknown>,
): FailedConstraint[] {
  const failures: FailedConstraint[] = [];
  if (!sc) return failures;
  const maxCalls = sc.maxCalls;
  if (typeof maxCalls === 'number') {
    const call = (state.calls ?? 0) + 1;
    if (call > maxCalls) {
      failures.push(
        failure(
          '',
          'max_calls',
          { maxCalls },
          call,
          `session call limit reached: at most ${maxCalls} calls per session (this would be call ${call})`,
        ),
      );
    }
  }
  for (const { argumentName: name, maxValue } of limitsOf(sc)) {
    const v = args ? argumentReader(name)(args) : undefined;
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      failures.push(typeFailure(name, 'number', typeName(v)));
      continue;
    }
    if (v < 0) {
      const text = `must not be negative under a session cumulative limit (got ${v})`;
      failures.push(failure(name, 'range', { minimum: 0 }, v, text));
      continue;
    }
    const before = state.cumulative?.[name] ?? 0;
    const total = before + v;
    if (over(total, maxValue)) {
      const text = `session total would be ${total} (${before} so far + ${v}), over the limit of ${maxValue}`;
      failures.push(failure(name, 'cumulative_limit', { maxValue }, total, text));
    }
  }
  return failures;
}

/** Adds session failures to an evaluation; any session failure makes the decision deny. */
export function mergeEvaluation(
  evaluation: Evaluation,
  sessionFailures: readonly FailedConstraint[],
): Evaluation {
  if (sessionFailures.length === 0) return evaluation;
  return buildEvaluation('deny', [...evaluation.failedConstraints, ...sessionFailures]);
}
