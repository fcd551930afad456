import { RE2JS } from 're2js';
import { describe, expect, it } from 'vitest';
import { compilePolicy, evaluate, type PolicyDefinition, scorePolicy } from './index.js';
import {
  compileRegex,
  DFA_HOT_STATES,
  DFA_MAX_INPUT,
  DFA_MAX_STATES,
  NFA_STEP_OVERHEAD,
  NFA_WORK,
  prepareRegex,
  regexCost,
} from './regex.js';

const det = (...constraints: PolicyDefinition['constraints'] & object): PolicyDefinition => ({
  mode: 'deterministic',
  constraints,
});

const MIB = 1 << 20;

/** Patterns whose DFA is built whole when they are compiled. */
const ORDINARY = [
  '^[a-z0-9._-]+@example\\.com$',
  '^/tmp/',
  '(?i)drop\\s+table',
  '^acct_[a-z0-9]{8}$',
  '(?i)\\b(?:password|secret|token)\\b',
  '^[^@]{1,64}@[^@]{1,255}$',
  '^[a-z0-9]{1,1000}$',
  '^[A-Za-z0-9+/]{0,1000}={0,2}$',
  '(?i)^[\\pL\\pN ]+$',
  '(?m)^\\s*rm\\s+-rf\\b',
  '[\\x{1F600}-\\x{1F64F}]',
  '\\p{Greek}{3,}',
  '',
];

/** Patterns searched by the NFA: a DFA too large to build, or a program too large. */
const HEAVY = [
  'a.{20}$',
  '(?i)\\b(?:a|b|c|d)\\w{0,40}\\b',
  '(?:.*x.*){1000}[^x]',
  '(.*x.*){1000}[^x]',
  '(?:(a*)(b*)){1000}c',
  '(?:a?b?c?){1000}d',
];

/** About the largest program a pattern of 256 characters compiles to. */
const LARGEST = `(?:${'x?'.repeat(123)}){1000}`;

let seed = 12345;
const random = () => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return seed / 2 ** 32;
};
const ALPHABET = [
  ...'abcdxyzACKS019 _-.@/\n\t',
  'é',
  'ß',
  'ſ',
  'K',
  'Ω',
  'я',
  '中',
  '😀',
  '😎',
  '𝐀',
  '\ud800',
  '\udfff',
  'ǅ',
];
function randomString(length: number): string {
  let s = '';
  for (let i = 0; i < length; i++) {
    s +=
      random() < 0.85
        ? ALPHABET[Math.floor(random() * ALPHABET.length)]!
        : String.fromCodePoint(Math.floor(random() * 0x110000) & ~(random() < 0.5 ? 0 : 0xf800));
  }
  return s;
}

describe('regex cost model', () => {
  it.each(ORDINARY)('builds the whole DFA of %j, which then meets a whole MiB', (pattern) => {
    const cost = regexCost(pattern)!;
    expect(cost.engine).toBe('dfa');
    expect(cost.dfaStates).toBeGreaterThan(0);
    expect(cost.dfaStates).toBeLessThanOrEqual(DFA_MAX_STATES);
    expect(cost.hotStates).toBeLessThanOrEqual(DFA_HOT_STATES);
    expect(cost.maxInput).toBe(DFA_MAX_INPUT);
    expect(DFA_MAX_INPUT).toBe(MIB);
  });

  it.each(HEAVY)('searches %j with the NFA, over at most NFA_WORK instruction visits', (pattern) => {
    const cost = regexCost(pattern)!;
    expect(cost.engine).toBe('nfa');
    expect(cost.dfaStates).toBe(0);
    const perCharacter = cost.programSize + NFA_STEP_OVERHEAD;
    // Characters plus the end of the text, each visiting every instruction at worst.
    expect((cost.maxInput + 1) * perCharacter).toBeLessThanOrEqual(NFA_WORK);
    expect((cost.maxInput + 2) * perCharacter).toBeGreaterThan(NFA_WORK);
  });

  it('gives the NFA bound of a few known programs', () => {
    const of = (pattern: string) => {
      const { programSize, maxInput } = regexCost(pattern)!;
      return { programSize, maxInput };
    };
    expect(of('a.{20}$')).toEqual({ programSize: 24, maxInput: 15_624 });
    expect(of('(?:.*x.*){1000}[^x]')).toEqual({ programSize: 5_003, maxInput: 98 });
    // The largest program a 256-character pattern reaches still meets a string.
    const largest = of(LARGEST);
    expect(largest.programSize).toBeGreaterThan(200_000);
    expect(largest.maxInput).toBe(1);
  });

  it('bounds the DFA it builds, not the program', () => {
    // 4,003 instructions, but six DFA states: a search follows built transitions only.
    expect(regexCost('(?:a*b*){1000}c')).toEqual({
      engine: 'dfa',
      programSize: 4_003,
      dfaStates: 6,
      hotStates: 6,
      maxInput: DFA_MAX_INPUT,
    });
    // 16 instructions, but 2^12 DFA states (the last 13 characters): too many to build.
    expect(regexCost('a.{12}$')).toMatchObject({ engine: 'nfa', programSize: 16 });
  });

  it('counts the states a search can cycle through, not those an anchored pattern passes once', () => {
    // 2,007 states in a chain: each is met at most once, then the search stays in a dead state.
    expect(regexCost('^[A-Za-z0-9+/]{0,1000}={0,2}$')).toMatchObject({
      engine: 'dfa',
      dfaStates: 2_007,
      hotStates: 3,
      maxInput: DFA_MAX_INPUT,
    });
    // Every state of `a.{k}$` can follow every other: past DFA_HOT_STATES the bound shrinks.
    const cycling = (k: number) => regexCost(`a.{${k}}$`)!;
    expect(cycling(6)).toMatchObject({ engine: 'dfa', hotStates: 162, maxInput: DFA_MAX_INPUT });
    expect(cycling(7)).toMatchObject({ engine: 'dfa', hotStates: 322, maxInput: 833_650 });
    expect(cycling(8)).toMatchObject({ engine: 'dfa', hotStates: 642, maxInput: 418_123 });
    for (const k of [7, 8, 9, 10]) {
      const cost = cycling(k);
      expect(cost.maxInput).toBe(Math.floor((DFA_MAX_INPUT * DFA_HOT_STATES) / cost.hotStates));
    }
  });

  it('keeps at most one literal scan before a built DFA, any prefilter before the NFA', () => {
    const prefilter = (pattern: string) =>
      (prepareRegex(pattern)!.re.re2() as unknown as { prefilter: { str: string } | null }).prefilter;
    expect(prefilter('^/tmp/')?.str).toBe('/tmp/');
    expect(prefilter('(?:alpha|bravo|charlie)')).toBeNull();
    expect(prefilter('a1.*b2.*c3')).toBeNull();
    expect(prefilter('(?:.*x.*){1000}[^x]')).not.toBeNull();
  });

  it('reports an invalid pattern as having no cost', () => {
    expect(regexCost('(')).toBeNull();
    expect(regexCost(5)).toBeNull();
    expect(regexCost('a'.repeat(257))).toBeNull();
  });
});

describe('regex search', () => {
  const inputs = [
    '',
    'DROP  TABLE users',
    'rm -rf /',
    '  rm -rf x\nok',
    'user.name@example.com',
    '/tmp/x',
    'acct_1a2b3c4d',
    'my password is',
    'κόσμος',
    'KELVIN \u212a and long s \u017f',
    'a😀b',
    'x'.repeat(30),
    `a${'b'.repeat(20)}`,
    ...Array.from({ length: 200 }, (_, i) => randomString(1 + (i % 40))),
  ];

  it.each([...ORDINARY, ...HEAVY, '(?s)a.{3}$', '\\B\\w\\b', '(?i)k', '(?i)ſ', '[^\\pL]'])(
    '%j answers like a plain re2js pattern',
    (pattern) => {
      const compiled = compileRegex(pattern);
      if (!compiled.ok) throw new Error(compiled.reason);
      const reference = RE2JS.compile(pattern);
      for (const input of inputs) {
        if (input.length > compiled.matcher.maxInput) continue;
        expect([input, compiled.matcher.test(input)]).toEqual([input, reference.test(input)]);
      }
    },
  );

  it('never builds a DFA state while searching, and keeps the NFA off the DFA', () => {
    for (const pattern of ORDINARY) {
      const prepared = prepareRegex(pattern)!;
      const dfa = (prepared.re.re2() as unknown as { lazyDFA: { stateCount: number } }).lazyDFA;
      const built = dfa.stateCount;
      expect(built).toBe(prepared.cost.dfaStates);
      expect(Object.hasOwn(dfa, 'closure')).toBe(false);
      for (const input of inputs) prepared.re.test(input);
      expect(dfa.stateCount).toBe(built);
    }
    for (const pattern of HEAVY) {
      const prepared = prepareRegex(pattern)!;
      const dfa = (prepared.re.re2() as unknown as { lazyDFA: { failed: boolean; stateCount: number } })
        .lazyDFA;
      expect(dfa.failed).toBe(true);
      for (const input of inputs.slice(0, 30)) prepared.re.test(input);
      expect(dfa.stateCount).toBe(0);
    }
  });

  it('classes every code point as re2js does', () => {
    for (const pattern of ['(?i)^[\\pL\\pN ]+$', '[\\x{FF}-\\x{101}\\x{10FFFF}]', '^/tmp/']) {
      const dfa = (
        prepareRegex(pattern)!.re.re2() as unknown as {
          lazyDFA: { runeClass(r: number): number; searchClass(r: number): number };
        }
      ).lazyDFA;
      let mismatches = 0;
      for (let r = 0; r <= 0x10ffff; r++) if (dfa.runeClass(r) !== dfa.searchClass(r)) mismatches++;
      expect([pattern, mismatches]).toEqual([pattern, 0]);
    }
  });

  it('searches a whole MiB with an ordinary pattern', () => {
    const policy = compilePolicy(det({ argumentName: 'sql', notRegex: '(?i)drop\\s+table' }));
    const tail = ' DROP TABLE users';
    const big = 'яé'.repeat(MIB).slice(0, MIB - tail.length) + tail;
    expect(big.length).toBe(MIB);
    const result = evaluate(policy, { sql: big });
    expect(result.decision).toBe('deny');
    expect(result.failedConstraints).toEqual([
      expect.objectContaining({ parameter: 'sql', constraint_type: 'not_regex' }),
    ]);
    expect(result.failedConstraints[0]!.message).toContain('must not match the pattern');
    expect(evaluate(policy, { sql: 'x'.repeat(MIB) }).decision).toBe('allow');
    expect(evaluate(policy, { sql: 'x'.repeat(MIB + 1) }).failedConstraints[0]!.message).toContain(
      'too long to be checked against the pattern',
    );
  });

  it('searches an NFA pattern up to its bound and fails closed past it', () => {
    const pattern = 'a.{20}$';
    const { maxInput } = regexCost(pattern)!;
    const policy = compilePolicy(det({ argumentName: 's', regex: pattern }));
    const atBound = `${'b'.repeat(maxInput - 21)}a${'c'.repeat(20)}`;
    expect(atBound.length).toBe(maxInput);
    expect(evaluate(policy, { s: atBound }).decision).toBe('allow');
    expect(evaluate(policy, { s: atBound.slice(1) }).decision).toBe('allow');
    const past = evaluate(policy, { s: `b${atBound}` });
    expect(past.decision).toBe('deny');
    expect(past.failedConstraints).toEqual([
      expect.objectContaining({ parameter: 's', constraint_type: 'regex' }),
    ]);
    expect(past.failedConstraints[0]!.message).toBe(
      `s: is too long to be checked against the pattern "a.{20}$": ${maxInput + 1} UTF-16 code units, at most ${maxInput} for this pattern`,
    );
  });

  it('loads a policy with the largest program a pattern can have, and fails it closed', () => {
    expect(LARGEST.length).toBe(256);
    const policy = compilePolicy(det({ argumentName: 's', regex: LARGEST }));
    expect(evaluate(policy, { s: 'x' }).decision).toBe('allow');
    const long = evaluate(policy, { s: 'xx' });
    expect(long.decision).toBe('deny');
    expect(long.failedConstraints[0]!.message).toContain('too long to be checked against the pattern');
  });
});

describe('regex quality notices', () => {
  it('says nothing for patterns that meet a whole MiB', () => {
    const constraints = ORDINARY.filter((p) => p !== '').map((regex, i) => ({
      argumentName: `a${i}`,
      regex,
    }));
    expect(scorePolicy(det(...constraints)).issues).toEqual([]);
  });

  it('names a short pattern with a large DFA differently from a large program', () => {
    const report = scorePolicy(
      det({ argumentName: 's', regex: 'a.{20}$' }, { argumentName: 't', notRegex: '(?:.*x.*){1000}[^x]' }),
    );
    expect(report.issues).toEqual([
      'Constraint 1 on "s": the regex pattern needs a large search automaton, so strings longer than 15624 characters (UTF-16 code units) are denied without being checked.',
      'Constraint 2 on "t": the notRegex pattern compiles to a large program, so strings longer than 98 characters (UTF-16 code units) are denied without being checked.',
    ]);
  });
});
