import { RE2JS } from 're2js';
import { codePointLength, MAX_REGEX_LENGTH } from './limits.js';

/** A compiled pattern: unanchored search with RE2 syntax (linear time, so ReDoS-safe). */
export interface RegexMatcher {
  readonly source: string;
  test(input: string): boolean;
}

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
  return { ok: true, matcher: { source: pattern, test: (input) => re.test(input) } };
}

/** A pattern matching `literal` anywhere in a string (used for contains / starts_with / ends_with). */
export function quoteRegex(literal: string): string {
  return RE2JS.quote(literal);
}
