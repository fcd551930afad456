import { show } from './format.js';
import { codePointLength, MAX_REGEX_LENGTH } from './limits.js';
import { quoteRegex, regexProblem } from './regex.js';
import type { Constraint } from './types.js';

/** Condition operators a draft rule may use (README "Draft rules" maps each one to constraints). */
export const DRAFT_OPERATORS = [
  'equals',
  'not_equals',
  'greater_than',
  'greater_than_or_equal',
  'less_than',
  'less_than_or_equal',
  'in',
  'not_in',
  'matches',
  'not_matches',
  'contains',
  'not_contains',
  'starts_with',
  'ends_with',
  'min_length',
  'max_length',
  'min_items',
  'max_items',
  'exists',
] as const;

export type DraftOperator = (typeof DRAFT_OPERATORS)[number];

/** The operators whose condition becomes one pattern (`regex` or `notRegex`) of the tool's policy. */
export const PATTERN_OPERATORS: ReadonlySet<DraftOperator> = new Set<DraftOperator>([
  'matches',
  'not_matches',
  'contains',
  'not_contains',
  'starts_with',
  'ends_with',
]);

export interface DraftCondition {
  field: string;
  operator: string;
  value: unknown;
}

export interface DraftRule {
  id: string;
  action: string;
  tools: string[];
  conditions: DraftCondition[];
  severity?: string;
  enabled?: boolean;
}

export interface DraftPolicy {
  toolName: string;
  constraints: Constraint[];
}

export interface SkippedRule {
  ruleId: string;
  reason: string;
}

export interface CompiledDraft {
  policies: DraftPolicy[];
  skipped: SkippedRule[];
}

/** What one condition contributes to an argument's constraint. */
interface Fragment {
  required?: true;
  lower?: Bound;
  upper?: Bound;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  enum?: string[];
  notEnum?: string[];
  regex?: string;
  notRegex?: string;
}

interface Bound {
  value: number;
  exclusive: boolean;
}

/**
 * A base predicate P in two forms: `holds` is the fragment permitting exactly the values where P is
 * true, `fails` the one permitting exactly those where it is false (null when constraints cannot say
 * that). P is false for an absent argument, so `holds` always carries `required`.
 */
interface Predicate {
  holds: Fragment;
  fails: Fragment | null;
}

type Translation = Predicate | string;

const NEGATED: Partial<Record<DraftOperator, DraftOperator>> = {
  not_equals: 'equals',
  not_in: 'in',
  not_matches: 'matches',
  not_contains: 'contains',
};

function isFiniteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

function pattern(source: string, op: string): string | null {
  const problem = regexProblem(source);
  return problem ? `${op} value cannot be used as a pattern: ${problem}` : null;
}

function literalPattern(op: string, value: unknown, wrap: (quoted: string) => string): Translation {
  if (typeof value !== 'string' || value.length === 0) return `${op} needs a non-empty string`;
  const source = wrap(quoteRegex(value));
  if (codePointLength(source) > MAX_REGEX_LENGTH) return `${op} value is too long to become a pattern`;
  return { holds: { required: true, regex: source }, fails: { notRegex: source } };
}

function bound(value: number, exclusive: boolean): Bound {
  return { value, exclusive };
}

function count(
  op: string,
  value: unknown,
  atLeast: 'minLength' | 'minItems',
  atMost: 'maxLength' | 'maxItems',
  isMin: boolean,
): Translation {
  if (!isCount(value)) return `${op} needs a whole number of 0 or more`;
  if (isMin) {
    // "length >= 0" holds for every string, so its negation ("not a string") has no constraint.
    return {
      holds: { required: true, [atLeast]: value },
      fails: value === 0 ? null : { [atMost]: value - 1 },
    };
  }
  return { holds: { required: true, [atMost]: value }, fails: { [atLeast]: value + 1 } };
}

/** The predicate of a positive operator (negative ones are looked up through NEGATED). */
function predicate(op: DraftOperator, value: unknown): Translation {
  switch (op) {
    case 'equals':
      if (typeof value === 'string')
        return { holds: { required: true, enum: [value] }, fails: { notEnum: [value] } };
      if (isFiniteNumber(value)) {
        // "not equal to n" is two intervals, which one constraint cannot hold.
        return {
          holds: { required: true, lower: bound(value, false), upper: bound(value, false) },
          fails: null,
        };
      }
      return 'equals needs a string or a finite number';
    case 'in':
      if (!Array.isArray(value) || value.length === 0 || !value.every((v) => typeof v === 'string')) {
        return 'in needs a non-empty list of strings';
      }
      return { holds: { required: true, enum: [...value] }, fails: { notEnum: [...value] } };
    case 'matches': {
      if (typeof value !== 'string') return 'matches needs a pattern string';
      const problem = pattern(value, op);
      return problem ?? { holds: { required: true, regex: value }, fails: { notRegex: value } };
    }
    case 'contains':
      return literalPattern(op, value, (q) => q);
    case 'starts_with':
      return literalPattern(op, value, (q) => `^${q}`);
    case 'ends_with':
      return literalPattern(op, value, (q) => `${q}$`);
    case 'greater_than':
    case 'greater_than_or_equal':
    case 'less_than':
    case 'less_than_or_equal': {
      if (!isFiniteNumber(value)) return `${op} needs a finite number`;
      const strict = op === 'greater_than' || op === 'less_than';
      if (op.startsWith('greater')) {
        return {
          holds: { required: true, lower: bound(value, strict) },
          fails: { upper: bound(value, !strict) },
        };
      }
      return {
        holds: { required: true, upper: bound(value, strict) },
        fails: { lower: bound(value, !strict) },
      };
    }
    case 'min_length':
      return count(op, value, 'minLength', 'maxLength', true);
    case 'max_length':
      return count(op, value, 'minLength', 'maxLength', false);
    case 'min_items':
      return count(op, value, 'minItems', 'maxItems', true);
    case 'max_items':
      return count(op, value, 'minItems', 'maxItems', false);
    case 'exists':
      if (value !== true && value !== undefined && value !== null) return 'exists takes true or no value';
      // Constraints cannot demand that an argument be absent.
      return { holds: { required: true }, fails: null };
    default:
      return `operator ${op} has no positive form`;
  }
}

function isOperator(op: unknown): op is DraftOperator {
  return typeof op === 'string' && (DRAFT_OPERATORS as readonly string[]).includes(op);
}

/** `arguments.amount` or a bare `amount`; nested paths stay dotted (`arguments.payment.amount`). */
function argumentOf(field: unknown): string | null {
  if (typeof field !== 'string') return null;
  const name = field.startsWith('arguments.') ? field.slice('arguments.'.length) : field;
  if (name.length === 0 || name === 'arguments' || name.startsWith('.') || name.endsWith('.')) return null;
  return name;
}

/** The fragment that lets a call through under this rule, or why it cannot be built. */
function translate(
  action: 'allow' | 'block',
  cond: DraftCondition,
): { name: string; fragment: Fragment } | string {
  if (!cond || typeof cond !== 'object') return 'a condition is not an object';
  const name = argumentOf(cond.field);
  if (name === null) return `field ${JSON.stringify(cond.field)} does not name an argument`;
  const op = cond.operator;
  if (!isOperator(op))
    return `operator ${JSON.stringify(op)} is not supported (supported: ${DRAFT_OPERATORS.join(', ')})`;
  const base = NEGATED[op];
  const p = predicate(base ?? op, cond.value);
  // Messages name the base operator; show the one the rule used.
  if (typeof p === 'string') return `"${name}": ${p.replace(/^\w+/, op)} (got ${show(cond.value)})`;
  // allow P → P holds; block P → P fails. A negated operator swaps the two.
  const wantHolds = (action === 'allow') !== (base !== undefined);
  const fragment = wantHolds ? p.holds : p.fails;
  if (fragment === null) {
    const what = cond.value === undefined ? op : `${op} ${show(cond.value)}`;
    return `"${name}": ${action} ${what} cannot be expressed exactly as constraints`;
  }
  return { name, fragment };
}

/** Per-argument accumulator: bounds take the tighter value, enums intersect, notEnum and patterns add up. */
class ArgumentAccumulator {
  required = false;
  lower: Bound | null = null;
  upper: Bound | null = null;
  counts: Partial<Record<'minLength' | 'maxLength' | 'minItems' | 'maxItems', number>> = {};
  enumValues: string[] | null = null;
  /** Insertion-ordered; sets, not arrays, so that lists of many values combine in linear time. */
  notEnum = new Set<string>();
  regexes: string[] = [];
  notRegexes: string[] = [];

  add(f: Fragment): void {
    if (f.required) this.required = true;
    if (f.lower) this.lower = pickBound(this.lower, f.lower, 1);
    if (f.upper) this.upper = pickBound(this.upper, f.upper, -1);
    for (const key of ['minLength', 'minItems'] as const) {
      const v = f[key];
      if (v !== undefined) this.counts[key] = Math.max(this.counts[key] ?? 0, v);
    }
    for (const key of ['maxLength', 'maxItems'] as const) {
      const v = f[key];
      if (v !== undefined) this.counts[key] = Math.min(this.counts[key] ?? Number.POSITIVE_INFINITY, v);
    }
    if (f.enum) {
      const prev = this.enumValues;
      const next = new Set(f.enum);
      this.enumValues = prev === null ? [...next] : prev.filter((v) => next.has(v));
    }
    if (f.notEnum) for (const v of f.notEnum) this.notEnum.add(v);
    if (f.regex !== undefined && !this.regexes.includes(f.regex)) this.regexes.push(f.regex);
    if (f.notRegex !== undefined && !this.notRegexes.includes(f.notRegex)) this.notRegexes.push(f.notRegex);
  }

  toConstraints(argumentName: string): Constraint[] {
    const c: Constraint = { argumentName, enabled: true };
    if (this.required) c.required = true;
    if (this.lower) c[this.lower.exclusive ? 'greaterThan' : 'minimum'] = this.lower.value;
    if (this.upper) c[this.upper.exclusive ? 'lessThan' : 'maximum'] = this.upper.value;
    Object.assign(c, this.counts);
    // enum E with notEnum N permits exactly E minus N; folding keeps the pair from reading as a contradiction.
    if (this.enumValues !== null) c.enum = this.enumValues.filter((v) => !this.notEnum.has(v));
    else if (this.notEnum.size > 0) c.notEnum = [...this.notEnum];
    if (this.regexes[0] !== undefined) c.regex = this.regexes[0];
    if (this.notRegexes[0] !== undefined) c.notRegex = this.notRegexes[0];
    const out = [c];
    // A constraint holds one regex and one notRegex; further ones get a constraint of their own.
    for (let i = 1; i < Math.max(this.regexes.length, this.notRegexes.length); i++) {
      const extra: Constraint = { argumentName, enabled: true };
      if (this.regexes[i] !== undefined) extra.regex = this.regexes[i];
      if (this.notRegexes[i] !== undefined) extra.notRegex = this.notRegexes[i];
      out.push(extra);
    }
    return out;
  }
}

/** direction 1 keeps the higher bound (lower bounds), -1 the lower one; on a tie exclusive is tighter. */
function pickBound(current: Bound | null, next: Bound, direction: 1 | -1): Bound {
  if (current === null) return next;
  const diff = (next.value - current.value) * direction;
  if (diff > 0 || (diff === 0 && next.exclusive)) return next;
  return current;
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}

function ruleProblem(rule: DraftRule): string | null {
  if (rule.enabled === false) return 'the rule is disabled (enabled: false)';
  if (rule.action !== 'allow' && rule.action !== 'block') {
    return `action ${JSON.stringify(rule.action)} cannot become constraints; only allow and block rules are approvable`;
  }
  if (!Array.isArray(rule.tools) || rule.tools.length === 0) return 'the rule names no tool';
  if (!rule.tools.every((t) => typeof t === 'string' && t.length > 0))
    return 'every tool must be a non-empty name';
  if (!Array.isArray(rule.conditions) || rule.conditions.length === 0) return 'the rule has no condition';
  if (rule.action === 'block' && rule.conditions.length > 1) {
    return 'a block rule with several conditions blocks only when all of them hold, which constraints cannot express exactly; use one block rule per condition';
  }
  return null;
}

/**
 * Turns approvable draft rules into one constraint set per tool. Every rule of a tool must hold (rules
 * combine with AND). Rules that cannot become constraints exactly are listed in `skipped`, never dropped.
 * `severity` does not affect the result.
 */
export function compileDraftRules(rules: DraftRule[]): CompiledDraft {
  const tools = new Map<string, Map<string, ArgumentAccumulator>>();
  const skipped: SkippedRule[] = [];
  (rules ?? []).forEach((rule, index) => {
    const ruleId = rule && typeof rule.id === 'string' && rule.id ? rule.id : `rule ${index + 1}`;
    if (!rule || typeof rule !== 'object') {
      skipped.push({ ruleId, reason: 'the rule is not an object' });
      return;
    }
    const problem = ruleProblem(rule);
    if (problem) {
      skipped.push({ ruleId, reason: problem });
      return;
    }
    const action = rule.action as 'allow' | 'block';
    const parts: { name: string; fragment: Fragment }[] = [];
    for (const cond of rule.conditions) {
      const result = translate(action, cond);
      if (typeof result === 'string') {
        // A rule applies whole or not at all: half a rule would change its meaning.
        skipped.push({ ruleId, reason: result });
        return;
      }
      parts.push(result);
    }
    for (const toolName of unique(rule.tools)) {
      const args = tools.get(toolName) ?? new Map<string, ArgumentAccumulator>();
      tools.set(toolName, args);
      for (const { name, fragment } of parts) {
        const acc = args.get(name) ?? new ArgumentAccumulator();
        args.set(name, acc);
        acc.add(fragment);
      }
    }
  });
  const policies = [...tools].map(([toolName, args]) => ({
    toolName,
    constraints: [...args].flatMap(([name, acc]) => acc.toConstraints(name)),
  }));
  return { policies, skipped };
}
