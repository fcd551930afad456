import { describe, expect, it } from 'vitest';
import { type Constraint, evaluateSession, type PolicyDefinition, scorePolicy } from './index.js';

const det = (...constraints: Constraint[]): PolicyDefinition => ({ mode: 'deterministic', constraints });

describe('scorePolicy', () => {
  it('gives a clean policy 100', () => {
    const tool = { arguments: [{ name: 'amount', type: 'number' as const }] };
    expect(scorePolicy(det({ argumentName: 'amount', minimum: 0, maximum: 100 }), tool)).toEqual({
      valid: true,
      score: 100,
      issues: [],
    });
  });

  it('returns hard problems with score 0', () => {
    const report = scorePolicy(det({ argumentName: 'q', regex: '(' }));
    expect(report.valid).toBe(false);
    expect(report.score).toBe(0);
    expect(report.issues[0]).toContain('regex cannot be used');
  });

  it('finds contradictory bounds, across aliases and exclusive bounds', () => {
    const cases: [Constraint, string][] = [
      [
        { argumentName: 'a', minimum: 10, maximum: 5 },
        '"a": minimum 10 and maximum 5 leave no number that can pass.',
      ],
      [
        { argumentName: 'a', greaterThanOrEqual: 10, lessThanOrEqual: 5 },
        '"a": greaterThanOrEqual 10 and lessThanOrEqual 5 leave no number that can pass.',
      ],
      [
        { argumentName: 'a', greaterThan: 5, lessThan: 5 },
        '"a": greaterThan 5 and lessThan 5 leave no number that can pass.',
      ],
      [
        { argumentName: 'a', minimum: 5, lessThan: 5 },
        '"a": minimum 5 and lessThan 5 leave no number that can pass.',
      ],
      [{ argumentName: 's', minLength: 5, maxLength: 2 }, '"s": minLength 5 is above maxLength 2.'],
      [{ argumentName: 't', minItems: 3, maxItems: 1 }, '"t": minItems 3 is above maxItems 1.'],
      [{ argumentName: 'e', enum: [] }, '"e": enum is empty, so no value can pass.'],
      [{ argumentName: 'e', enum: ['x', 'y'], notEnum: ['y'] }, '"e": "y" is both in enum and in notEnum.'],
      [
        { argumentName: 'x', minimum: 1, minLength: 1 },
        '"x": minimum needs a number, minLength needs a string; no value can pass all of them.',
      ],
      [
        { argumentName: 'x', notRegex: '' },
        'Constraint 1 on "x": an empty notRegex matches every string, so every string is denied.',
      ],
    ];
    for (const [constraint, issue] of cases) {
      const report = scorePolicy(det(constraint));
      expect(report.issues).toEqual([issue]);
      expect(report.valid).toBe(false);
      expect(report.score).toBe(40);
    }
    expect(scorePolicy(det({ argumentName: 'a', minimum: 5, maximum: 5 })).valid).toBe(true);
  });

  it('combines constraints on the same argument', () => {
    const report = scorePolicy(det({ argumentName: 'a', minimum: 10 }, { argumentName: 'a', maximum: 5 }));
    expect(report.valid).toBe(false);
    const enums = scorePolicy(det({ argumentName: 'e', enum: ['a'] }, { argumentName: 'e', enum: ['b'] }));
    expect(enums.issues).toEqual(['"e": its enum lists have no value in common, so no value can pass.']);
    const disabled = scorePolicy(
      det({ argumentName: 'a', minimum: 10 }, { argumentName: 'a', maximum: 5, enabled: false }),
    );
    expect(disabled.valid).toBe(true);
  });

  it('checks constraints against the registered tool', () => {
    const tool = {
      arguments: [
        { name: 'amount', type: 'number' as const },
        { name: 'payment', type: 'object' as const },
        { name: 'tags', type: 'array' as const },
      ],
    };
    const report = scorePolicy(
      {
        mode: 'deterministic',
        constraints: [
          { argumentName: 'amount', minLength: 1 },
          { argumentName: 'ghost', required: true },
          { argumentName: 'payment.total', maximum: 5 },
          { argumentName: 'tags', maxItems: 3 },
        ],
        sessionConstraints: { cumulativeLimits: [{ argumentName: 'tags', maxValue: 3 }] },
      },
      tool,
    );
    expect(report.valid).toBe(true);
    expect(report.issues).toEqual([
      '"amount": minLength needs a string, but the tool declares it as number; every call carrying it would be denied.',
      'A constraint targets "ghost", which the registered tool does not declare.',
      'The cumulative limit on "tags" needs a number, but the tool declares it as array.',
    ]);
    expect(report.score).toBe(100 - 20 - 15 - 20);
  });

  it('flags a deterministic policy that constrains nothing', () => {
    const issue =
      'The policy constrains nothing (no enabled constraint and no session limit), so every call is allowed.';
    expect(scorePolicy({ mode: 'deterministic' })).toEqual({ valid: true, score: 50, issues: [issue] });
    const disabledOnly = scorePolicy(det({ argumentName: 'a', maximum: 1, enabled: false }));
    expect(disabledOnly.issues).toEqual([issue]);
    expect(scorePolicy({ mode: 'deterministic', sessionConstraints: { maxCalls: 5 } }).issues).toEqual([]);
  });

  it('scores llm policies', () => {
    const empty = scorePolicy({ mode: 'llm', llmConfig: { description: '  ' } });
    expect(empty.issues).toEqual(['The llm policy has an empty description, so it states no rule.']);
    expect(empty).toMatchObject({ valid: false, score: 40 });
    expect(scorePolicy({ mode: 'llm' }).issues[0]).toContain('empty description');
    expect(scorePolicy({ mode: 'llm' }).valid).toBe(false);
    const stated = scorePolicy({ mode: 'llm', llmConfig: { description: 'refunds under $50 only' } });
    expect(stated).toEqual({ valid: true, score: 100, issues: [] });
  });

  it('reports softer problems with smaller penalties', () => {
    const report = scorePolicy({
      mode: 'deterministic',
      constraints: [
        { argumentName: 'a', maximum: 3, maxLenght: 3 } as Constraint,
        { argumentName: 'b' },
        { argumentName: 'c', regex: '' },
      ],
      sessionConstraints: { maxCalls: 0, cumulativeLimits: [{ argumentName: 'a', maxValue: 0 }] },
      llmConfig: { description: 'x' },
    });
    expect(report.valid).toBe(true);
    expect(report.issues).toEqual([
      'Constraint 1 on "a" has an unknown field "maxLenght"; it is ignored.',
      'Constraint 2 on "b" checks nothing.',
      'Constraint 3 on "c": an empty regex matches every string, so it restricts nothing.',
      'sessionConstraints.maxCalls is 0, so every call is denied.',
      'The cumulative limit on "a" is 0, so only zero values can pass.',
      'llmConfig is ignored in deterministic mode.',
    ]);
    expect(report.score).toBe(100 - 15 - 5 - 5 - 15 - 15 - 5);
  });

  it('says how long a string a large pattern is run on, and nothing for an ordinary one', () => {
    const report = scorePolicy({
      mode: 'deterministic',
      constraints: [
        { argumentName: 's', notRegex: '(?:.*x.*){1000}[^x]' },
        {
          argumentName: 'email',
          regex: '(?i)^[a-z0-9._%+-]{1,64}@(?:[a-z0-9-]{1,63}\\.){1,8}[a-z]{2,63}$',
        },
        { argumentName: 'id', regex: '^acct_[a-z0-9]{8}$' },
      ],
    });
    expect(report.issues).toHaveLength(2);
    expect(report.issues[0]).toMatch(
      /^Constraint 1 on "s": the notRegex pattern compiles to a large program, so strings longer than \d+ characters \(UTF-16 code units\) are denied without being checked\.$/,
    );
    expect(report.issues[1]).toMatch(
      /^Constraint 2 on "email": the regex pattern compiles to a large program/,
    );
    expect(report.score).toBe(100 - 5 - 5);
  });
});

describe('quality report and session evaluation agree', () => {
  it('says what a cumulative limit of 0 or below lets through', () => {
    const sc = (maxValue: number) => ({ cumulativeLimits: [{ argumentName: 'a', maxValue }] });
    const passes = (maxValue: number, value: number) =>
      evaluateSession(sc(maxValue), { calls: 0, cumulative: {} }, { a: value }).length === 0;
    expect(passes(0, 0)).toBe(true);
    expect(scorePolicy({ mode: 'deterministic', sessionConstraints: sc(0) }).issues).toEqual([
      'The cumulative limit on "a" is 0, so only zero values can pass.',
    ]);
    expect(passes(-1, 0)).toBe(false);
    expect(scorePolicy({ mode: 'deterministic', sessionConstraints: sc(-1) }).issues).toEqual([
      'The cumulative limit on "a" is -1, so every call carrying it is denied.',
    ]);
  });
});
