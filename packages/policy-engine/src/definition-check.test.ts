import { describe, expect, it } from 'vitest';
import { checkPolicyDefinition, MAX_REGEX_LENGTH, type PolicyDefinition } from './index.js';

const det = (...constraints: unknown[]) => ({ mode: 'deterministic', constraints }) as PolicyDefinition;
const check = (def: unknown) => checkPolicyDefinition(def as PolicyDefinition);

describe('checkPolicyDefinition', () => {
  it('accepts a well-formed policy, with null meaning "not set"', () => {
    expect(
      check({
        mode: 'deterministic',
        constraints: [
          {
            argumentName: 'amount',
            enabled: true,
            minimum: 0,
            maximum: null,
            regex: null,
            action: 'require_approval',
          },
          { argumentName: 'tags', minItems: 0, maxItems: 3, enum: ['a'], notEnum: [] },
        ],
        sessionConstraints: { maxCalls: 5, cumulativeLimits: [{ argumentName: 'amount', maxValue: 100 }] },
        llmConfig: null,
      }),
    ).toEqual([]);
    expect(check({ mode: 'llm', llmConfig: { description: 'x', preferredModel: 'google' } })).toEqual([]);
  });

  it('rejects regexes over 256 characters', () => {
    const long = 'a'.repeat(MAX_REGEX_LENGTH + 1);
    expect(check(det({ argumentName: 'q', regex: long }))).toEqual([
      'Constraint 1 on "q": regex cannot be used: it is 257 characters long; the limit is 256.',
    ]);
    expect(check(det({ argumentName: 'q', notRegex: 'a'.repeat(MAX_REGEX_LENGTH) }))).toEqual([]);
  });

  it('counts a regex in characters (code points), not UTF-16 units', () => {
    // 256 emoji are 512 UTF-16 units: still 256 characters, within the limit.
    expect(check(det({ argumentName: 'q', regex: '😀'.repeat(MAX_REGEX_LENGTH) }))).toEqual([]);
    expect(check(det({ argumentName: 'q', regex: `^${'😀'.repeat(200)}$` }))).toEqual([]);
    expect(check(det({ argumentName: 'q', notRegex: '😀'.repeat(MAX_REGEX_LENGTH + 1) }))).toEqual([
      'Constraint 1 on "q": notRegex cannot be used: it is 257 characters long; the limit is 256.',
    ]);
  });

  it('rejects patterns re2js cannot compile and gives its reason', () => {
    const [lookahead] = check(det({ argumentName: 'q', regex: 'a(?=b)' }));
    expect(lookahead).toContain(
      'Constraint 1 on "q": regex cannot be used: it does not compile as an RE2 pattern',
    );
    expect(lookahead).toContain('invalid or unsupported Perl syntax');
    const [backref] = check(det({ argumentName: 'q', notRegex: '(a)\\1' }));
    expect(backref).toContain('notRegex cannot be used');
    expect(backref).toContain('invalid escape sequence');
  });

  it('checks disabled constraints too', () => {
    expect(check(det({ argumentName: 'q', regex: '(', enabled: false }))).toHaveLength(1);
  });

  it('rejects non-finite numbers, bad lengths and bad lists, naming the argument', () => {
    const problems = check(
      det({
        argumentName: 'amount',
        minimum: Number.POSITIVE_INFINITY,
        lessThan: '5',
        minLength: -1,
        maxItems: 1.5,
        enum: ['a', 1],
        notEnum: 'x',
        required: 'yes',
        action: 'warn',
      }),
    );
    expect(problems).toEqual([
      'Constraint 1 on "amount": required must be true or false (got "yes").',
      'Constraint 1 on "amount": minimum must be a finite number (got Infinity).',
      'Constraint 1 on "amount": lessThan must be a finite number (got "5").',
      'Constraint 1 on "amount": minLength must be a whole number of 0 or more (got -1).',
      'Constraint 1 on "amount": maxItems must be a whole number of 0 or more (got 1.5).',
      'Constraint 1 on "amount": enum must be an array of strings.',
      'Constraint 1 on "amount": notEnum must be an array of strings.',
      'Constraint 1 on "amount": action must be "deny" or "require_approval" (got "warn").',
    ]);
  });

  it('rejects a bad shape', () => {
    expect(check(null)).toEqual(['The policy definition must be an object.']);
    expect(check({ mode: 'fuzzy' })).toEqual(['mode must be "deterministic" or "llm" (got "fuzzy").']);
    expect(check({ mode: 'deterministic', constraints: {} })).toEqual(['constraints must be an array.']);
    expect(check(det('x', { argumentName: '' }))).toEqual([
      'Constraint 1 must be an object.',
      'Constraint 2 needs an argumentName (a non-empty string).',
    ]);
  });

  it('checks session constraints', () => {
    expect(
      check({
        mode: 'deterministic',
        sessionConstraints: {
          maxCalls: -1,
          cumulativeLimits: [{ argumentName: 'amount', maxValue: Number.NaN }, { maxValue: 1 }, 3],
        },
      }),
    ).toEqual([
      'sessionConstraints.maxCalls must be a whole number of 0 or more (got -1).',
      'Cumulative limit 1 on "amount": maxValue must be a finite number (got NaN).',
      'Cumulative limit 2 needs an argumentName (a non-empty string).',
      'Cumulative limit 3 must be an object.',
    ]);
    expect(check({ mode: 'deterministic', sessionConstraints: { cumulativeLimits: {} } })).toEqual([
      'sessionConstraints.cumulativeLimits must be an array.',
    ]);
  });

  it('checks the llm config', () => {
    expect(
      check({
        mode: 'llm',
        llmConfig: {
          description: 5,
          exceptions: [1],
          argumentInstructions: [{ argumentName: 'a' }],
          preferredModel: 'other',
        },
      }),
    ).toEqual([
      'llmConfig.description must be a string.',
      'llmConfig.exceptions must be an array of strings.',
      'llmConfig.argumentInstructions must be an array of {argumentName, instruction} strings.',
      'llmConfig.preferredModel must be one of openai, anthropic, google (got "other").',
    ]);
  });
});
