import { RE2JS } from 're2js';
import { describe, expect, it } from 'vitest';
import {
  checkPolicyDefinition,
  compileDraftRules,
  compilePolicy,
  DRAFT_OPERATORS,
  type DraftOperator,
  type DraftRule,
  evaluate,
} from './index.js';
import { codePointLength } from './limits.js';

const rule = (
  id: string,
  action: string,
  field: string,
  operator: string,
  value: unknown,
  tools = ['pay'],
): DraftRule => ({
  id,
  action,
  tools,
  conditions: [{ field, operator, value }],
});

describe('compileDraftRules', () => {
  it('maps allow and block rules to constraints (brief examples)', () => {
    const { policies, skipped } = compileDraftRules([
      rule('allow-small', 'allow', 'arguments.amount', 'less_than_or_equal', 200),
      rule('block-big', 'block', 'arguments.total', 'greater_than', 200),
      rule('block-x', 'block', 'arguments.env', 'equals', 'x'),
      rule('block-re', 'block', 'to', 'matches', '@evil\\.com$'),
      rule('block-in', 'block', 'arguments.cur', 'in', ['JPY', 'CNY']),
      rule('block-long', 'block', 'arguments.memo', 'min_length', 5),
    ]);
    expect(skipped).toEqual([]);
    expect(policies).toEqual([
      {
        toolName: 'pay',
        constraints: [
          { argumentName: 'amount', enabled: true, required: true, maximum: 200 },
          { argumentName: 'total', enabled: true, maximum: 200 },
          { argumentName: 'env', enabled: true, notEnum: ['x'] },
          { argumentName: 'to', enabled: true, notRegex: '@evil\\.com$' },
          { argumentName: 'cur', enabled: true, notEnum: ['JPY', 'CNY'] },
          { argumentName: 'memo', enabled: true, maxLength: 4 },
        ],
      },
    ]);
  });

  it('merges rules per tool and argument, keeping the tighter bound', () => {
    const { policies, skipped } = compileDraftRules([
      rule('r1', 'allow', 'arguments.amount', 'less_than_or_equal', 200, ['pay', 'refund']),
      rule('r2', 'block', 'arguments.amount', 'greater_than_or_equal', 150),
      rule('r3', 'allow', 'arguments.amount', 'greater_than', 0),
      rule('r4', 'block', 'arguments.amount', 'less_than', 1),
      rule('r5', 'allow', 'arguments.cur', 'in', ['USD', 'EUR', 'GBP']),
      rule('r6', 'block', 'arguments.cur', 'not_in', ['EUR', 'GBP', 'JPY']),
      rule('r7', 'block', 'arguments.cur', 'equals', 'GBP'),
      rule('r8', 'block', 'arguments.cur', 'equals', 'CHF'),
      rule('r9', 'allow', 'arguments.to', 'matches', '^[a-z]+@'),
      rule('r10', 'allow', 'arguments.to', 'ends_with', '.com'),
      rule('r11', 'block', 'arguments.to', 'contains', 'test'),
    ]);
    expect(skipped).toEqual([]);
    expect(policies).toEqual([
      {
        toolName: 'pay',
        constraints: [
          { argumentName: 'amount', enabled: true, required: true, minimum: 1, lessThan: 150 },
          { argumentName: 'cur', enabled: true, required: true, enum: ['EUR'] },
          { argumentName: 'to', enabled: true, required: true, regex: '^[a-z]+@', notRegex: 'test' },
          { argumentName: 'to', enabled: true, regex: '\\.com$' },
        ],
      },
      {
        toolName: 'refund',
        constraints: [{ argumentName: 'amount', enabled: true, required: true, maximum: 200 }],
      },
    ]);
    for (const p of policies)
      expect(checkPolicyDefinition({ mode: 'deterministic', constraints: p.constraints })).toEqual([]);
  });

  it('reports every rule it cannot approve, with a reason', () => {
    const { policies, skipped } = compileDraftRules([
      { ...rule('off', 'allow', 'a', 'equals', 'x'), enabled: false },
      rule('log', 'log', 'a', 'equals', 'x'),
      { ...rule('no-tools', 'allow', 'a', 'equals', 'x'), tools: [] },
      { id: 'no-conditions', action: 'block', tools: ['pay'], conditions: [] },
      rule('bad-number', 'allow', 'arguments.amount', 'greater_than', 'abc'),
      rule('bad-regex', 'block', 'arguments.q', 'matches', '(?=x)'),
      rule('bad-op', 'allow', 'arguments.q', 'sounds_like', 'x'),
      rule('bad-field', 'allow', 'arguments.', 'equals', 'x'),
      rule('not-exact', 'block', 'arguments.amount', 'equals', 5),
      rule('not-exact-2', 'allow', 'arguments.amount', 'not_equals', 5),
      rule('never-absent', 'block', 'arguments.a', 'exists', true),
      rule('all-strings', 'block', 'arguments.a', 'min_length', 0),
      rule('bool', 'allow', 'arguments.flag', 'equals', true),
      rule('number-list', 'allow', 'arguments.n', 'in', [1, 2]),
      {
        id: 'two-blocks',
        action: 'block',
        tools: ['pay'],
        conditions: [
          { field: 'a', operator: 'equals', value: 'x' },
          { field: 'b', operator: 'equals', value: 'y' },
        ],
      },
      {
        id: 'half-bad',
        action: 'allow',
        tools: ['pay'],
        conditions: [
          { field: 'a', operator: 'equals', value: 'x' },
          { field: 'b', operator: 'less_than', value: '7' },
        ],
      },
    ]);
    expect(policies).toEqual([]);
    expect(skipped).toEqual([
      { ruleId: 'off', reason: 'the rule is disabled (enabled: false)' },
      {
        ruleId: 'log',
        reason: 'action "log" cannot become constraints; only allow and block rules are approvable',
      },
      { ruleId: 'no-tools', reason: 'the rule names no tool' },
      { ruleId: 'no-conditions', reason: 'the rule has no condition' },
      { ruleId: 'bad-number', reason: '"amount": greater_than needs a finite number (got "abc")' },
      {
        ruleId: 'bad-regex',
        reason: expect.stringContaining('"q": matches value cannot be used as a pattern'),
      },
      {
        ruleId: 'bad-op',
        reason: expect.stringContaining('operator "sounds_like" is not supported (supported: equals,'),
      },
      { ruleId: 'bad-field', reason: 'field "arguments." does not name an argument' },
      { ruleId: 'not-exact', reason: '"amount": block equals 5 cannot be expressed exactly as constraints' },
      {
        ruleId: 'not-exact-2',
        reason: '"amount": allow not_equals 5 cannot be expressed exactly as constraints',
      },
      { ruleId: 'never-absent', reason: '"a": block exists true cannot be expressed exactly as constraints' },
      { ruleId: 'all-strings', reason: '"a": block min_length 0 cannot be expressed exactly as constraints' },
      { ruleId: 'bool', reason: '"flag": equals needs a string or a finite number (got true)' },
      { ruleId: 'number-list', reason: '"n": in needs a non-empty list of strings (got [1,2])' },
      { ruleId: 'two-blocks', reason: expect.stringContaining('a block rule with several conditions') },
      { ruleId: 'half-bad', reason: '"b": less_than needs a finite number (got "7")' },
    ]);
  });

  it("combines long value lists as sets: the intersection in the first list's order, less the blocked ones", () => {
    const n = 20_000;
    const all = Array.from({ length: n }, (_, i) => `v${i}`);
    const evens = all.filter((_, i) => i % 2 === 0).reverse();
    const tens = all.filter((_, i) => i % 10 === 0);
    const { policies, skipped } = compileDraftRules([
      rule('all', 'allow', 'arguments.cur', 'in', all),
      rule('evens', 'allow', 'arguments.cur', 'in', evens),
      rule('tens', 'block', 'arguments.cur', 'in', tens),
      rule('tens-again', 'block', 'arguments.cur', 'in', tens),
    ]);
    expect(skipped).toEqual([]);
    const allowed = policies[0]!.constraints[0]!.enum!;
    expect(allowed).toEqual(all.filter((_, i) => i % 2 === 0 && i % 10 !== 0));
    const blockedOnly = compileDraftRules([
      rule('tens', 'block', 'arguments.cur', 'in', tens),
      rule('evens', 'block', 'arguments.cur', 'in', evens),
    ]).policies[0]!.constraints[0]!;
    expect(blockedOnly.notEnum).toEqual([...new Set([...tens, ...evens])]);
  });

  it('measures a literal turned pattern in characters (code points), as the regex limit counts', () => {
    // 200 emoji are 400 UTF-16 units but 200 characters: within the 256 of a pattern.
    const { policies, skipped } = compileDraftRules([
      rule('emoji', 'block', 'arguments.memo', 'contains', '😀'.repeat(200)),
      rule('too-long', 'block', 'arguments.note', 'contains', '😀'.repeat(257)),
    ]);
    expect(policies[0]?.constraints).toEqual([
      { argumentName: 'memo', enabled: true, notRegex: '😀'.repeat(200) },
    ]);
    expect(skipped).toEqual([
      {
        ruleId: 'too-long',
        reason: expect.stringContaining('contains value is too long to become a pattern'),
      },
    ]);
  });

  it('keeps rules without an id identifiable', () => {
    const { skipped } = compileDraftRules([
      { action: 'log', tools: ['t'], conditions: [] } as unknown as DraftRule,
    ]);
    expect(skipped).toEqual([{ ruleId: 'rule 1', reason: expect.any(String) }]);
  });
});

/** What a rule means, evaluated directly (plain JS semantics) to check the compiled constraints. */
function holds(op: DraftOperator, actual: unknown, value: unknown): boolean {
  const s = typeof actual === 'string' ? actual : null;
  const n = typeof actual === 'number' ? actual : null;
  const a = Array.isArray(actual) ? actual : null;
  switch (op) {
    case 'equals':
      return actual === value;
    case 'not_equals':
      return actual !== value;
    case 'in':
      return (value as unknown[]).includes(actual);
    case 'not_in':
      return !(value as unknown[]).includes(actual);
    case 'matches':
      return s !== null && RE2JS.compile(value as string).test(s);
    case 'not_matches':
      return !(s !== null && RE2JS.compile(value as string).test(s));
    case 'contains':
      return s?.includes(value as string) ?? false;
    case 'not_contains':
      return !(s?.includes(value as string) ?? false);
    case 'starts_with':
      return s?.startsWith(value as string) ?? false;
    case 'ends_with':
      return s?.endsWith(value as string) ?? false;
    case 'greater_than':
      return n !== null && n > (value as number);
    case 'greater_than_or_equal':
      return n !== null && n >= (value as number);
    case 'less_than':
      return n !== null && n < (value as number);
    case 'less_than_or_equal':
      return n !== null && n <= (value as number);
    case 'min_length':
      return s !== null && codePointLength(s) >= (value as number);
    case 'max_length':
      return s !== null && codePointLength(s) <= (value as number);
    case 'min_items':
      return a !== null && a.length >= (value as number);
    case 'max_items':
      return a !== null && a.length <= (value as number);
    case 'exists':
      return actual !== undefined;
  }
}

const STRINGS = [
  '',
  'x',
  'prod',
  'staging',
  'a.b',
  'test.abc',
  'abc@evil.com',
  'hello',
  'hellos',
  '😀😀😀',
  'prefix-1',
];
const NUMBERS = [-1, 0, 4.5, 5, 5.5, 10, 200, 201];
const ARRAYS = [[], ['a'], ['a', 'b', 'c']];

const SAMPLES: Record<DraftOperator, { values: unknown[]; inputs: unknown[] }> = {
  equals: { values: ['prod', 5], inputs: [...STRINGS, ...NUMBERS] },
  not_equals: { values: ['prod', 5], inputs: [...STRINGS, ...NUMBERS] },
  in: { values: [['prod', 'staging']], inputs: STRINGS },
  not_in: { values: [['prod', 'staging']], inputs: STRINGS },
  matches: { values: ['^[a-z]+$', '@evil\\.com$', ''], inputs: STRINGS },
  not_matches: { values: ['^[a-z]+$', '@evil\\.com$'], inputs: STRINGS },
  contains: { values: ['.', 'ell'], inputs: STRINGS },
  not_contains: { values: ['.', 'ell'], inputs: STRINGS },
  starts_with: { values: ['prefix-', 'a.'], inputs: STRINGS },
  ends_with: { values: ['.com', 's'], inputs: STRINGS },
  greater_than: { values: [5, 200], inputs: NUMBERS },
  greater_than_or_equal: { values: [5, 200], inputs: NUMBERS },
  less_than: { values: [5, 200], inputs: NUMBERS },
  less_than_or_equal: { values: [5, 200], inputs: NUMBERS },
  min_length: { values: [0, 1, 3, 5], inputs: STRINGS },
  max_length: { values: [0, 3, 5], inputs: STRINGS },
  min_items: { values: [0, 1, 3], inputs: ARRAYS },
  max_items: { values: [0, 1, 3], inputs: ARRAYS },
  exists: { values: [true], inputs: [...STRINGS, ...NUMBERS] },
};

describe('draft rules are compiled exactly', () => {
  it('covers every operator', () => {
    expect(Object.keys(SAMPLES).sort()).toEqual([...DRAFT_OPERATORS].sort());
  });

  // For each operator, value and action: the compiled policy must permit exactly the calls the rule permits
  // (allow: the condition holds; block: it does not), for absent arguments and for values of the type the
  // operator works on. Values of another type fail closed by design and are not sampled here.
  for (const op of DRAFT_OPERATORS) {
    it(op, () => {
      const { values, inputs } = SAMPLES[op];
      let compiledCount = 0;
      let checked = 0;
      for (const value of values) {
        for (const action of ['allow', 'block'] as const) {
          const { policies, skipped } = compileDraftRules([rule('r', action, 'arguments.v', op, value)]);
          if (skipped.length > 0) continue;
          compiledCount++;
          const compiled = compilePolicy({
            mode: 'deterministic',
            constraints: policies[0]?.constraints ?? [],
          });
          for (const input of [undefined, ...inputs]) {
            const mixed = op === 'equals' || op === 'not_equals';
            if (mixed && input !== undefined && typeof input !== typeof value) continue;
            checked++;
            const permitted = action === 'allow' ? holds(op, input, value) : !holds(op, input, value);
            const args = input === undefined ? {} : { v: input };
            const decision = evaluate(compiled, args).decision;
            expect([action, op, value, input, decision]).toEqual([
              action,
              op,
              value,
              input,
              permitted ? 'allow' : 'deny',
            ]);
          }
        }
      }
      expect(compiledCount).toBeGreaterThan(0);
      expect(checked).toBeGreaterThan(compiledCount * 3);
    });
  }
});
