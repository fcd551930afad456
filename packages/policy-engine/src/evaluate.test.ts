import { RE2JS } from 're2js';
import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  evaluate,
  LLM_UNAVAILABLE,
  type PolicyDefinition,
  PolicyDefinitionError,
} from './index.js';
import { compileRegex } from './regex.js';

const det = (...constraints: PolicyDefinition['constraints'] & object): PolicyDefinition => ({
  mode: 'deterministic',
  constraints,
});

describe('evaluate', () => {
  const payment = compilePolicy(
    det(
      { argumentName: 'currency', required: true, enum: ['USD', 'EUR'] },
      { argumentName: 'amount', minimum: 0, maximum: 100 },
      { argumentName: 'account', regex: '^acct_[a-z0-9]{8}$' },
    ),
  );

  it('returns one shared frozen result on the allow path', () => {
    const a = evaluate(payment, { currency: 'USD', amount: 5, account: 'acct_12345678' });
    const b = evaluate(payment, { currency: 'EUR' });
    expect(a).toBe(b);
    expect(a).toEqual({ decision: 'allow', reason: null, failedConstraints: [], failedArgument: null });
    expect(Object.isFrozen(a)).toBe(true);
    expect(Object.isFrozen(a.failedConstraints)).toBe(true);
  });

  it('reports every failure with expected, actual and a readable message', () => {
    const result = evaluate(payment, { currency: 'JPY', amount: 250, account: 'x' });
    expect(result.decision).toBe('deny');
    expect(result.failedArgument).toBe('currency');
    expect(result.failedConstraints).toEqual([
      {
        parameter: 'currency',
        constraint_type: 'enum',
        expected: ['USD', 'EUR'],
        actual: 'JPY',
        message: 'currency: must be one of "USD", "EUR" (got "JPY")',
      },
      {
        parameter: 'amount',
        constraint_type: 'range',
        expected: { maximum: 100 },
        actual: 250,
        message: 'amount: must be at most 100 (got 250)',
      },
      {
        parameter: 'account',
        constraint_type: 'regex',
        expected: '^acct_[a-z0-9]{8}$',
        actual: 'x',
        message: 'account: must match the pattern "^acct_[a-z0-9]{8}$" (got "x")',
      },
    ]);
    expect(result.reason).toBe(result.failedConstraints.map((f) => f.message).join('; '));
  });

  it('describes each kind of failure', () => {
    const policy = compilePolicy(
      det(
        { argumentName: 'to', required: true },
        { argumentName: 'cc', notNull: true },
        { argumentName: 'n', greaterThan: 0, lessThan: 10 },
        { argumentName: 'lo', greaterThanOrEqual: 3 },
        { argumentName: 'name', minLength: 2, maxLength: 3 },
        { argumentName: 'tags', minItems: 1 },
        { argumentName: 'env', notEnum: ['prod'] },
        { argumentName: 'sql', notRegex: 'drop' },
        { argumentName: 'q', maxLength: 1 },
      ),
    );
    const result = evaluate(policy, {
      cc: null,
      n: 0,
      lo: 1,
      name: 'a',
      tags: [],
      env: 'prod',
      sql: 'drop it',
      q: 7,
    });
    expect(result.failedConstraints.map((f) => [f.constraint_type, f.expected, f.actual, f.message])).toEqual(
      [
        ['required', 'present', 'absent', 'to: is required but missing'],
        ['not_null', 'not null', null, 'cc: must not be null'],
        ['range', { greaterThan: 0 }, 0, 'n: must be greater than 0 (got 0)'],
        ['range', { minimum: 3 }, 1, 'lo: must be at least 3 (got 1)'],
        ['length', { minLength: 2 }, 1, 'name: must be at least 2 characters long (got 1)'],
        ['items', { minItems: 1 }, 0, 'tags: must have at least 1 item (got 0)'],
        ['not_enum', ['prod'], 'prod', 'env: must not be "prod"'],
        ['not_regex', 'drop', 'drop it', 'sql: must not match the pattern "drop" (got "drop it")'],
        ['type', 'string', 'number', 'q: must be a string (got number)'],
      ],
    );
  });

  it('treats NaN and Infinity as non-numbers', () => {
    const policy = compilePolicy(det({ argumentName: 'n', maximum: 10 }));
    for (const n of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const [f] = evaluate(policy, { n }).failedConstraints;
      expect(f).toMatchObject({ constraint_type: 'type', expected: 'number', actual: 'non-finite number' });
    }
  });

  it('denies arguments that are not an object and accepts a missing one as empty', () => {
    const policy = compilePolicy(det({ argumentName: 'n', maximum: 10 }));
    const bad = evaluate(policy, [1, 2] as unknown as Record<string, unknown>);
    expect(bad.decision).toBe('deny');
    expect(bad.failedConstraints[0]).toEqual({
      parameter: '',
      constraint_type: 'type',
      expected: 'object',
      actual: 'array',
      message: 'arguments must be an object (got array)',
    });
    expect(bad.failedArgument).toBeNull();
    expect(evaluate(policy, undefined as unknown as Record<string, unknown>).decision).toBe('allow');
  });

  it('fails closed with unevaluable when reading an argument throws', () => {
    const policy = compilePolicy(
      det({ argumentName: 'n', maximum: 10, action: 'require_approval' }, { argumentName: 'm', maximum: 1 }),
    );
    const args = {
      get n(): number {
        throw new Error('boom');
      },
      m: 0,
    };
    const result = evaluate(policy, args);
    expect(result.decision).toBe('deny');
    expect(result.failedConstraints).toEqual([
      expect.objectContaining({ parameter: 'n', constraint_type: 'unevaluable', actual: 'boom' }),
    ]);
  });

  it('reports string lengths in code points', () => {
    const policy = compilePolicy(det({ argumentName: 's', maxLength: 2 }));
    expect(evaluate(policy, { s: '😀😀' }).decision).toBe('allow');
    expect(evaluate(policy, { s: '😀😀😀' }).failedConstraints[0]?.actual).toBe(3);
    expect(evaluate(policy, { s: 'a\ud800' }).decision).toBe('allow');
  });

  it('supports several constraints on one argument', () => {
    const policy = compilePolicy(
      det(
        { argumentName: 'p', regex: '^/srv/' },
        { argumentName: 'p', notRegex: '\\.\\.' },
        { argumentName: 'p', maxLength: 8 },
      ),
    );
    const types = evaluate(policy, { p: '/etc/../x' }).failedConstraints.map((f) => f.constraint_type);
    expect(types).toEqual(['regex', 'not_regex', 'length']);
  });

  it('reads one object under a dotted key and its nested path twice, as its JSON would be', () => {
    // The service reads calls parsed from JSON, where the two are always distinct objects: an SDK
    // deciding on the caller's objects, where they may be one, must give the same failures.
    const policy = compilePolicy(det({ argumentName: 'p.q', maxItems: 1 }));
    const shared = [1, 2];
    const asObjects = evaluate(policy, { 'p.q': shared, p: { q: shared } });
    const asJson = evaluate(policy, JSON.parse(JSON.stringify({ 'p.q': shared, p: { q: shared } })));
    expect(asObjects).toEqual(asJson);
    expect(asObjects.failedConstraints).toHaveLength(2);
    // A scalar present under both names is still checked once.
    expect(
      evaluate(compilePolicy(det({ argumentName: 'p.q', maximum: 1 })), { 'p.q': 5, p: { q: 5 } }),
    ).toMatchObject({ reason: 'p.q: must be at most 1 (got 5)' });
  });

  it("reads an array's length through a dotted name, as policies written on it rely on", () => {
    const policy = compilePolicy(det({ argumentName: 'recipients.length', required: true, maximum: 10 }));
    expect(evaluate(policy, { recipients: Array(50).fill('a') }).reason).toBe(
      'recipients.length: must be at most 10 (got 50)',
    );
    expect(evaluate(policy, { recipients: [] }).decision).toBe('allow');
    expect(evaluate(policy, {}).reason).toBe('recipients.length: is required but missing');
  });

  it('denies llm policies with the documented reason', () => {
    const result = evaluate(compilePolicy({ mode: 'llm', llmConfig: { description: 'refunds only' } }), {});
    expect(result).toEqual({
      decision: 'deny',
      reason: LLM_UNAVAILABLE,
      failedConstraints: [
        {
          parameter: '',
          constraint_type: 'mode',
          expected: 'deterministic',
          actual: 'llm',
          message: LLM_UNAVAILABLE,
        },
      ],
      failedArgument: null,
    });
    expect(LLM_UNAVAILABLE).toBe('LLM policy evaluation is not available: no model is configured');
  });

  it('does not let a caller corrupt the shared allow result', () => {
    const policy = compilePolicy(det());
    const result = evaluate(policy, {});
    expect(() => result.failedConstraints.push({} as never)).toThrow(TypeError);
    expect(evaluate(policy, {}).failedConstraints).toHaveLength(0);
  });
});

describe('compilePolicy', () => {
  it('throws PolicyDefinitionError listing every problem', () => {
    const bad = det(
      { argumentName: 'a', regex: '(unclosed' },
      { argumentName: 'b', maximum: Number.NaN, enabled: false },
    );
    try {
      compilePolicy(bad);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(PolicyDefinitionError);
      const problems = (error as PolicyDefinitionError).problems;
      expect(problems).toHaveLength(2);
      expect(problems[0]).toContain('missing closing )');
      expect(problems[1]).toContain('maximum must be a finite number');
    }
  });

  it('keeps the session constraints for the caller', () => {
    const compiled = compilePolicy({ mode: 'deterministic', sessionConstraints: { maxCalls: 3 } });
    expect(compiled.sessionConstraints).toEqual({ maxCalls: 3 });
    expect(compiled.mode).toBe('deterministic');
  });
});

describe('regex matching', () => {
  // The engine routes anchored patterns to re2js's DFA for speed; it must answer exactly like re2js.
  const patterns = [
    '^[a-z][a-z0-9_-]{2,31}$',
    '^acct_[a-z0-9]{8}$',
    '^https://',
    '(?i)\\bdrop\\s+table\\b',
    '^$',
    '^(a|ab)(c|bcd)(d*)$',
    '[0-9]+$',
    '^\\p{L}+$',
    '(?m)^x$',
    '(?s)^a.b$',
  ];
  const inputs = [
    '',
    'x',
    'abc',
    'abcd',
    'ab_cd',
    'acct_1a2b3c4d',
    'https://x',
    'DROP  table t',
    'a\nb',
    'x\nx',
    'été',
    '12',
    'a😀b',
  ];
  it.each(patterns)('%s answers like a plain re2js pattern', (pattern) => {
    const compiled = compileRegex(pattern);
    if (!compiled.ok) throw new Error(compiled.reason);
    const reference = RE2JS.compile(pattern);
    for (const input of inputs)
      expect([input, compiled.matcher.test(input)]).toEqual([input, reference.test(input)]);
  });
});

describe('regex work bound', () => {
  // About 5,000 instructions: searching 20,000 characters took seconds.
  const HEAVY = '(?:.*x.*){1000}[^xyzab]';
  const text = (n: number) => Array.from({ length: n }, (_, i) => 'xyzab'[(i * 7) % 5]).join('');

  it('gives a pattern a longest input that shrinks with its compiled size', () => {
    const small = compileRegex('^acct_[a-z0-9]{8}$');
    const heavy = compileRegex(HEAVY);
    if (!small.ok || !heavy.ok) throw new Error('patterns compile');
    expect(small.matcher.maxInput).toBeGreaterThan((1 << 20) - 1);
    expect(heavy.matcher.maxInput).toBeGreaterThan(50);
    expect(heavy.matcher.maxInput).toBeLessThan(1000);
  });

  it('fails a regex or notRegex constraint on a string too long to search, without searching it', () => {
    const heavy = compileRegex(HEAVY);
    if (!heavy.ok) throw new Error('compiles');
    const long = text(heavy.matcher.maxInput + 1);
    for (const [constraint, kind] of [
      [{ argumentName: 's', regex: HEAVY }, 'regex'],
      [{ argumentName: 's', notRegex: HEAVY }, 'not_regex'],
    ] as const) {
      const policy = compilePolicy(det(constraint));
      const tooLong = evaluate(policy, { s: long });
      expect(tooLong.decision).toBe('deny');
      expect(tooLong.failedConstraints).toEqual([
        expect.objectContaining({ parameter: 's', constraint_type: kind }),
      ]);
      expect(tooLong.failedConstraints[0]!.message).toContain('too long to be checked against the pattern');
      // Within the bound the pattern is searched as usual: no character outside xyzab, so no match.
      const within = evaluate(policy, { s: text(50) });
      expect(within.decision).toBe(kind === 'regex' ? 'deny' : 'allow');
    }
  });
});
