import { buildEvaluation, failure, typeFailure, unevaluable } from './failures.js';
import { argumentReadings, typeName } from './lookup.js';
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
 * The session's total so far for one argument: 0 when it has none, null when the stored total is
 * not a finite number. Own properties only: `constructor` or `toString` must never read what a plain
 * object inherits (a function, which turns the sum into a string that no limit ever exceeds).
 */
function totalSoFar(cumulative: Record<string, number> | undefined, name: string): number | null {
  if (cumulative === undefined || cumulative === null || !Object.hasOwn(cumulative, name)) return 0;
  const before: unknown = cumulative[name];
  if (before === undefined || before === null) return 0;
  return typeof before === 'number' && Number.isFinite(before) ? before : null;
}

const countable = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** Every reading of one argument the call carries (argumentReadings); none without arguments. */
const readingsOf = (name: string, args: Record<string, unknown>): unknown[] =>
  args ? argumentReadings(name)(args) : [];

/**
 * The value a call adds under one cumulative limit, from its readings of the argument: null when
 * there are none or one cannot be counted (evaluateSession denies such a call). A name present both
 * as the exact key and as the nested path counts the larger reading: the tool may use either.
 */
function addedValue(readings: readonly unknown[]): number | null {
  let value: number | null = null;
  for (const v of readings) {
    if (!countable(v)) return null;
    value = value === null ? v : Math.max(value, v);
  }
  return value;
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
    const v = addedValue(readingsOf(argumentName, args));
    if (v !== null) cumulative[argumentName] = v;
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
    const readings = readingsOf(name, args);
    if (readings.length === 0) continue;
    let countableReadings = true;
    for (const v of readings) {
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        failures.push(typeFailure(name, 'number', typeName(v)));
        countableReadings = false;
      } else if (v < 0) {
        const text = `must not be negative under a session cumulative limit (got ${v})`;
        failures.push(failure(name, 'range', { minimum: 0 }, v, text));
        countableReadings = false;
      }
    }
    if (!countableReadings) continue;
    const v = addedValue(readings) as number;
    const before = totalSoFar(state.cumulative, name);
    if (before === null) {
      // A corrupt stored total cannot be checked against the limit: fail closed.
      failures.push(unevaluable(name, new Error('the session total so far is not a finite number')));
      continue;
    }
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
