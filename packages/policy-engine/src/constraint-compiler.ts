import { isSet } from './definition-check.js';
import { failure, typeFailure } from './failures.js';
import { plural, show, showList } from './format.js';
import { codePointLength } from './limits.js';
import { argumentReadings, typeName } from './lookup.js';
import { compileRegex, type RegexMatcher } from './regex.js';
import type { Constraint, FailedConstraint } from './types.js';

/** Checks one constraint against the call's arguments; null when it passes (no allocation). */
export type ConstraintCheck = (args: Record<string, unknown>) => FailedConstraint[] | null;

const hasOwn = Object.hasOwn;

/** The tighter of two optional bounds; null when neither is set. */
function tighter(a: unknown, b: unknown, pick: (x: number, y: number) => number): number | null {
  const x = isSet(a) ? (a as number) : null;
  const y = isSet(b) ? (b as number) : null;
  if (x === null) return y;
  if (y === null) return x;
  return pick(x, y);
}

function optional(v: unknown): number | null {
  return isSet(v) ? (v as number) : null;
}

function matcherFor(pattern: unknown): RegexMatcher | null {
  if (!isSet(pattern)) return null;
  const compiled = compileRegex(pattern);
  if (compiled.ok) return compiled.matcher;
  // checkPolicyDefinition rejects such patterns before compiling, so this is a programming error.
  throw new Error(`unusable pattern reached the compiler: ${compiled.reason}`);
}

/** Fail closed: a string too long to be searched within the work budget is not searched at all. */
function tooLong(m: RegexMatcher, v: string): string {
  return `is too long to be checked against the pattern ${show(m.source)}: ${v.length} UTF-16 code units, at most ${m.maxInput} for this pattern`;
}

function push(out: FailedConstraint[] | null, f: FailedConstraint): FailedConstraint[] {
  if (out === null) return [f];
  out.push(f);
  return out;
}

/**
 * Precompiles one enabled constraint into a single closure. The checks are written inline behind
 * precomputed null tests rather than as a list of small closures: that keeps every call site
 * monomorphic, which roughly halves evaluation time. Order of checks (and of reported failures):
 * required, not_null, numeric bounds, string checks (length, enum, not_enum, regex, not_regex), array
 * items; each group is guarded by a strict type check. Returns null for a constraint that checks nothing.
 */
export function compileConstraint(c: Constraint): ConstraintCheck | null {
  const name = c.argumentName;
  // A dotted name may be read two ways (argumentReadings); a plain one is read directly, allocating nothing.
  const readDotted = name.includes('.') ? argumentReadings(name) : null;
  const required = c.required === true;
  const notNull = c.notNull === true;

  // Aliases fold into their canonical field; when both are set the tighter bound is the one that bites.
  const min = tighter(c.minimum, c.greaterThanOrEqual, Math.max);
  const max = tighter(c.maximum, c.lessThanOrEqual, Math.min);
  const gt = optional(c.greaterThan);
  const lt = optional(c.lessThan);
  const minLength = optional(c.minLength);
  const maxLength = optional(c.maxLength);
  const enumList = isSet(c.enum) ? Object.freeze([...(c.enum as string[])]) : null;
  const enumSet = enumList ? new Set(enumList) : null;
  const notEnumList = isSet(c.notEnum) ? Object.freeze([...(c.notEnum as string[])]) : null;
  const notEnumSet = notEnumList ? new Set(notEnumList) : null;
  const regex = matcherFor(c.regex);
  const notRegex = matcherFor(c.notRegex);
  const minItems = optional(c.minItems);
  const maxItems = optional(c.maxItems);

  const hasNums = min !== null || max !== null || gt !== null || lt !== null;
  const hasStrs =
    minLength !== null ||
    maxLength !== null ||
    enumSet !== null ||
    notEnumSet !== null ||
    regex !== null ||
    notRegex !== null;
  const hasArrs = minItems !== null || maxItems !== null;
  if (!required && !notNull && !hasNums && !hasStrs && !hasArrs) return null;

  const missing = Object.freeze(failure(name, 'required', 'present', 'absent', 'is required but missing'));
  const isNull = Object.freeze(failure(name, 'not_null', 'not null', null, 'must not be null'));

  const checkNumber = (v: number, out: FailedConstraint[] | null): FailedConstraint[] | null => {
    if (min !== null && v < min) {
      out = push(out, failure(name, 'range', { minimum: min }, v, `must be at least ${min} (got ${v})`));
    }
    if (max !== null && v > max) {
      out = push(out, failure(name, 'range', { maximum: max }, v, `must be at most ${max} (got ${v})`));
    }
    if (gt !== null && v <= gt) {
      out = push(
        out,
        failure(name, 'range', { greaterThan: gt }, v, `must be greater than ${gt} (got ${v})`),
      );
    }
    if (lt !== null && v >= lt) {
      out = push(out, failure(name, 'range', { lessThan: lt }, v, `must be less than ${lt} (got ${v})`));
    }
    return out;
  };

  const checkString = (v: string, out: FailedConstraint[] | null): FailedConstraint[] | null => {
    // Code points lie between ceil(units / 2) and units, so most strings need no scan.
    if (minLength !== null && v.length < minLength * 2) {
      const n = codePointLength(v);
      if (n < minLength) {
        const text = `must be at least ${plural(minLength, 'character')} long (got ${n})`;
        out = push(out, failure(name, 'length', { minLength }, n, text));
      }
    }
    if (maxLength !== null && v.length > maxLength) {
      const n = codePointLength(v);
      if (n > maxLength) {
        const text = `must be at most ${plural(maxLength, 'character')} long (got ${n})`;
        out = push(out, failure(name, 'length', { maxLength }, n, text));
      }
    }
    if (enumSet !== null && !enumSet.has(v)) {
      const list = enumList as readonly string[];
      out = push(out, failure(name, 'enum', list, v, `must be one of ${showList(list)} (got ${show(v)})`));
    }
    if (notEnumSet?.has(v)) {
      out = push(out, failure(name, 'not_enum', notEnumList, v, `must not be ${show(v)}`));
    }
    if (regex !== null) {
      if (v.length > regex.maxInput)
        out = push(out, failure(name, 'regex', regex.source, v, tooLong(regex, v)));
      else if (!regex.test(v)) {
        const text = `must match the pattern ${show(regex.source)} (got ${show(v)})`;
        out = push(out, failure(name, 'regex', regex.source, v, text));
      }
    }
    if (notRegex !== null) {
      if (v.length > notRegex.maxInput) {
        out = push(out, failure(name, 'not_regex', notRegex.source, v, tooLong(notRegex, v)));
      } else if (notRegex.test(v)) {
        const text = `must not match the pattern ${show(notRegex.source)} (got ${show(v)})`;
        out = push(out, failure(name, 'not_regex', notRegex.source, v, text));
      }
    }
    return out;
  };

  const checkArray = (v: unknown[], out: FailedConstraint[] | null): FailedConstraint[] | null => {
    if (minItems !== null && v.length < minItems) {
      const text = `must have at least ${plural(minItems, 'item')} (got ${v.length})`;
      out = push(out, failure(name, 'items', { minItems }, v.length, text));
    }
    if (maxItems !== null && v.length > maxItems) {
      const text = `must have at most ${plural(maxItems, 'item')} (got ${v.length})`;
      out = push(out, failure(name, 'items', { maxItems }, v.length, text));
    }
    return out;
  };

  /** The checks of one value the argument has. */
  const checkValue = (v: unknown): FailedConstraint[] | null => {
    let out: FailedConstraint[] | null = null;
    if (notNull && v === null) out = [isNull];
    if (hasNums) {
      if (typeof v === 'number' && Number.isFinite(v)) out = checkNumber(v, out);
      else out = push(out, typeFailure(name, 'number', typeName(v)));
    }
    if (hasStrs) {
      if (typeof v === 'string') out = checkString(v, out);
      else out = push(out, typeFailure(name, 'string', typeName(v)));
    }
    if (hasArrs) {
      if (Array.isArray(v)) out = checkArray(v, out);
      else out = push(out, typeFailure(name, 'array', typeName(v)));
    }
    return out;
  };

  // One closure for both kinds of name keeps the evaluator's call site monomorphic.
  // An absent argument skips every other check; only `required` cares.
  return (args) => {
    if (readDotted === null) {
      const v = hasOwn(args, name) ? args[name] : undefined;
      return v === undefined ? (required ? [missing] : null) : checkValue(v);
    }
    const readings = readDotted(args);
    if (readings.length === 0) return required ? [missing] : null;
    // Present both as the exact key and as the nested path: the tool may read either, so both must pass.
    const first = checkValue(readings[0]);
    if (readings.length === 1) return first;
    const second = checkValue(readings[1]);
    if (first === null) return second;
    return second === null ? first : first.concat(second);
  };
}
