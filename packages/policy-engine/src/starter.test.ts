import { describe, expect, it } from 'vitest';
import { checkPolicyDefinition, starterPolicy, type ToolArgument } from './index.js';

describe('starterPolicy', () => {
  it('turns declarations into constraints and skips undeclared arguments', () => {
    const args: ToolArgument[] = [
      { name: 'amount', type: 'number', required: true, minimum: 0, maximum: 1000 },
      { name: 'currency', type: 'string', enum: ['USD', 'EUR'] },
      { name: 'account', type: 'string', pattern: '^acct_[a-z0-9]{8}$' },
      { name: 'memo', type: 'string', description: 'free text' },
      { name: 'optional', type: 'string', required: false },
    ];
    const { definition, skipped } = starterPolicy(args);
    expect(skipped).toEqual([]);
    expect(definition).toEqual({
      mode: 'deterministic',
      constraints: [
        { argumentName: 'amount', enabled: true, required: true, minimum: 0, maximum: 1000 },
        { argumentName: 'currency', enabled: true, enum: ['USD', 'EUR'] },
        { argumentName: 'account', enabled: true, regex: '^acct_[a-z0-9]{8}$' },
      ],
    });
    expect(checkPolicyDefinition(definition)).toEqual([]);
  });

  it('skips unusable patterns and lists them instead of failing', () => {
    const { definition, skipped } = starterPolicy([
      { name: 'long', type: 'string', required: true, pattern: 'a'.repeat(300) },
      { name: 'lookahead', type: 'string', pattern: '^(?=x)' },
    ]);
    expect(definition.constraints).toEqual([{ argumentName: 'long', enabled: true, required: true }]);
    expect(skipped).toEqual([
      '"long": pattern is not enforced: it is 300 characters long; the limit is 256.',
      expect.stringMatching(
        /^"lookahead": pattern is not enforced: it does not compile as an RE2 pattern \(.*\(\?=/,
      ),
    ]);
  });

  it('skips declarations that would deny every call carrying the argument', () => {
    const { definition, skipped } = starterPolicy([
      { name: 'count', type: 'string', minimum: 1 },
      { name: 'code', type: 'number', enum: ['1'] },
      { name: 'id', type: 'number', pattern: '^[0-9]+$' },
      { name: 'range', type: 'number', minimum: 10, maximum: 1 },
      { name: 'none', type: 'string', enum: [] },
    ]);
    expect(definition.constraints).toEqual([]);
    expect(skipped).toEqual([
      '"count": minimum is not enforced: it needs a number argument, but the argument is declared as string.',
      '"code": enum is not enforced: it needs a string argument, but the argument is declared as number.',
      '"id": pattern is not enforced: it needs a string argument, but the argument is declared as number.',
      '"range": minimum and maximum are not enforced: minimum 10 is above maximum 1.',
      '"none": enum is not enforced: it is empty.',
    ]);
  });

  it('handles an empty argument list', () => {
    expect(starterPolicy([])).toEqual({
      definition: { mode: 'deterministic', constraints: [] },
      skipped: [],
    });
  });
});
