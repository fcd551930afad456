import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  evaluate,
  evaluateSession,
  mergeEvaluation,
  type SessionConstraints,
  sessionIncrements,
} from './index.js';

const limits: SessionConstraints = {
  maxCalls: 3,
  cumulativeLimits: [
    { argumentName: 'amount', maxValue: 100 },
    { argumentName: 'order.units', maxValue: 10 },
  ],
};

describe('session constraints', () => {
  it('counts one call and the numeric values under a limit', () => {
    expect(sessionIncrements(limits, { amount: 40, order: { units: 2 }, other: 9 })).toEqual({
      calls: 1,
      cumulative: { amount: 40, 'order.units': 2 },
    });
    expect(sessionIncrements(limits, { amount: '40', order: { units: -2 } })).toEqual({
      calls: 1,
      cumulative: {},
    });
    expect(sessionIncrements(null, { amount: 1 })).toEqual({ calls: 1, cumulative: {} });
  });

  it('allows calls 1..maxCalls and denies the next', () => {
    expect(evaluateSession(limits, { calls: 2, cumulative: {} }, {})).toEqual([]);
    expect(evaluateSession(limits, { calls: 3, cumulative: {} }, {})).toEqual([
      {
        parameter: '',
        constraint_type: 'max_calls',
        expected: { maxCalls: 3 },
        actual: 4,
        message: 'session call limit reached: at most 3 calls per session (this would be call 4)',
      },
    ]);
  });

  it('fails a cumulative limit when before + value exceeds it', () => {
    const state = { calls: 0, cumulative: { amount: 70 } };
    expect(evaluateSession(limits, state, { amount: 30 })).toEqual([]);
    expect(evaluateSession(limits, state, { amount: 31 })).toEqual([
      {
        parameter: 'amount',
        constraint_type: 'cumulative_limit',
        expected: { maxValue: 100 },
        actual: 101,
        message: 'amount: session total would be 101 (70 so far + 31), over the limit of 100',
      },
    ]);
  });

  it('fails closed on values that cannot be counted', () => {
    const state = { calls: 0, cumulative: {} };
    const types = (args: Record<string, unknown>) =>
      evaluateSession(limits, state, args).map((f) => [f.parameter, f.constraint_type, f.actual]);
    expect(types({ amount: '5' })).toEqual([['amount', 'type', 'string']]);
    expect(types({ amount: null })).toEqual([['amount', 'type', 'null']]);
    expect(types({ amount: Number.NaN })).toEqual([['amount', 'type', 'non-finite number']]);
    expect(types({ amount: -1 })).toEqual([['amount', 'range', -1]]);
    expect(types({ order: { units: 11 } })).toEqual([['order.units', 'cumulative_limit', 11]]);
  });

  it('reads only own session totals, whatever the argument is called', () => {
    // A plain object inherits `constructor`, `toString`...: read as a total, the sum would be a string.
    // Computed keys and JSON.parse both make `__proto__` an own property.
    for (const name of ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__']) {
      const sc = { cumulativeLimits: [{ argumentName: name, maxValue: 10 }] };
      const fresh = evaluateSession(sc, { calls: 0, cumulative: {} }, { [name]: 100 });
      expect(fresh.map((f) => [f.parameter, f.constraint_type, f.actual])).toEqual([
        [name, 'cumulative_limit', 100],
      ]);
      expect(evaluateSession(sc, { calls: 0, cumulative: {} }, { [name]: 10 })).toEqual([]);
      const counted = evaluateSession(
        sc,
        { calls: 1, cumulative: JSON.parse(`{"${name}": 8}`) },
        { [name]: 3 },
      );
      expect(counted.map((f) => [f.constraint_type, f.actual])).toEqual([['cumulative_limit', 11]]);
    }
  });

  it('denies when the stored total is not a number', () => {
    const sc = { cumulativeLimits: [{ argumentName: 'amount', maxValue: 10 }] };
    const state = {
      calls: 1,
      cumulative: { amount: 'function Object() { [native code] }5' as unknown as number },
    };
    expect(evaluateSession(sc, state, { amount: 1 }).map((f) => f.constraint_type)).toEqual(['unevaluable']);
    expect(evaluateSession(sc, { calls: 1, cumulative: { amount: Number.NaN } }, { amount: 1 })).toHaveLength(
      1,
    );
  });

  it('merges session failures into a deny', () => {
    const compiled = compilePolicy({
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 50, action: 'require_approval' }],
    });
    const evaluation = evaluate(compiled, { amount: 60 });
    expect(evaluation.decision).toBe('require_approval');
    expect(mergeEvaluation(evaluation, [])).toBe(evaluation);
    const merged = mergeEvaluation(
      evaluation,
      evaluateSession(limits, { calls: 3, cumulative: {} }, { amount: 60 }),
    );
    expect(merged.decision).toBe('deny');
    expect(merged.failedArgument).toBe('amount');
    expect(merged.failedConstraints.map((f) => f.constraint_type)).toEqual(['range', 'max_calls']);
    expect(merged.reason).toBe(
      'amount: must be at most 50 (got 60); session call limit reached: at most 3 calls per session (this would be call 4)',
    );
    const fromAllow = mergeEvaluation(
      evaluate(compiled, {}),
      evaluateSession({ maxCalls: 0 }, { calls: 0, cumulative: {} }, {}),
    );
    expect(fromAllow).toMatchObject({ decision: 'deny', failedArgument: null });
  });
});

describe('cumulative limit tolerance', () => {
  const under = (maxValue: number, before: number, value: number) =>
    evaluateSession(
      { cumulativeLimits: [{ argumentName: 'x', maxValue }] },
      { calls: 0, cumulative: { x: before } },
      { x: value },
    ).map((f) => f.constraint_type);

  it('is relative to the limit: under a limit of 0 any positive total is over', () => {
    for (const x of [1e-10, 1e-300, Number.MIN_VALUE, 0.001])
      expect(under(0, 0, x)).toEqual(['cumulative_limit']);
    expect(under(0, 0, 0)).toEqual([]);
    // A small limit gets a proportionally small tolerance.
    expect(under(1e-6, 0, 1e-6 + 1e-12)).toEqual(['cumulative_limit']);
    expect(under(1e-6, 0, 1e-6 * (1 + 1e-10))).toEqual([]);
  });

  it('keeps floating-point sums on the limit', () => {
    expect(under(0.3, 0.1, 0.2)).toEqual([]);
    expect(under(0.3, 0.1 + 0.2, 1e-10)).toEqual([]);
    expect(under(0.3, 0.1 + 0.2, 1e-9)).toEqual(['cumulative_limit']);
    expect(under(1e12, 1e12, 1)).toEqual([]);
    expect(under(1e12, 1e12, 1e4)).toEqual(['cumulative_limit']);
  });
});
