import { RE2JS } from 're2js';
import { codePointLength, MAX_REGEX_LENGTH } from './limits.js';

/** A compiled pattern: unanchored search with RE2 syntax (linear time, so ReDoS-safe). */
export interface RegexMatcher {
  readonly source: string;
  /**
   * The longest input (in UTF-16 code units) this pattern is run on: longer ones are refused unread
   * (the constraint fails). See REGEX_WORK_BUDGET.
   */
  readonly maxInput: number;
  test(input: string): boolean;
}

/**
 * Linear in the input is not cheap enough: 256 characters of counted repetition compile to thousands
 * of instructions, and when re2js's DFA gives up on such a program a search costs more than the
 * input's length times the program's size (`(?:.*x.*){1000}[^x]`, about 5,000 instructions, took 3 s
 * on 20,000 characters). An input is searched only while its length times the program's size squared
 * stays under this budget: measured at that bound, the worst patterns took about 50 ms with 1,000
 * instructions and 0.4 s with 5,000, instead of minutes on a 1 MiB argument. Patterns of up to about
 * 240 instructions still meet a whole 1 MiB string; an email-like `^[^@]{1,64}@[^@]{1,255}$` (641)
 * meets 146,000 code units.
 */
export const REGEX_WORK_BUDGET = 6e10;

export type RegexCompileResult = { ok: true; matcher: RegexMatcher } | { ok: false; reason: string };

/**
 * re2js picks its one-pass engine for anchored patterns (`^...$`), which is 3-5x slower than its DFA
 * for a boolean match. Clearing the field routes `test` to the DFA, which gives identical answers
 * (it is the engine re2js itself uses for every other pattern). If a later re2js renames the field this
 * only costs speed, never correctness.
 */
function preferDfa(re: RE2JS): void {
  const engine = re.re2() as unknown as { onepass?: unknown };
  if (engine && typeof engine === 'object' && 'onepass' in engine) engine.onepass = null;
}

/**
 * The compiled program's instruction count; if a later re2js hides it, an estimate from the
 * pattern's length that errs high (every character of a 256-character pattern as 32 instructions).
 */
function programSize(re: RE2JS, pattern: string): number {
  const prog = (re.re2() as unknown as { prog?: { inst?: unknown } } | null)?.prog;
  return Array.isArray(prog?.inst) ? prog.inst.length : 32 * pattern.length;
}

/** Why a pattern is unusable, or null. Checked when a policy is written, never at call time. */
export function regexProblem(pattern: unknown): string | null {
  const result = compileRegex(pattern);
  return result.ok ? null : result.reason;
}

export function compileRegex(pattern: unknown): RegexCompileResult {
  if (typeof pattern !== 'string') return { ok: false, reason: 'it is not a string' };
  // Counted in characters (code points), as SPEC's "max 256 chars" and every other length limit.
  const length = codePointLength(pattern);
  if (length > MAX_REGEX_LENGTH) {
    return { ok: false, reason: `it is ${length} characters long; the limit is ${MAX_REGEX_LENGTH}` };
  }
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    return { ok: false, reason: `it does not compile as an RE2 pattern (${detail})` };
  }
  preferDfa(re);
  const size = Math.max(1, programSize(re, pattern));
  const maxInput = Math.floor(REGEX_WORK_BUDGET / (size * size));
  return { ok: true, matcher: { source: pattern, maxInput, test: (input) => re.test(input) } };
}

/** A pattern matching `literal` anywhere in a string (used for contains / starts_with / ends_with). */
export function quoteRegex(literal: string): string {
  return RE2JS.quote(literal);
}
