import { CONSTRAINT_FIELDS, checkPolicyDefinition, isSet } from './definition-check.js';
import { show } from './format.js';
import { MAX_REGEX_LENGTH } from './limits.js';
import { regexCost } from './regex.js';
import type { ArgType, Constraint, PolicyDefinition, ToolArgument } from './types.js';

export interface QualityReport {
  valid: boolean;
  score: number;
  issues: string[];
}

/** Penalties (see README "Quality scoring"). */
export const PENALTY = {
  contradiction: 40,
  constrainsNothing: 50,
  emptyLlmDescription: 40,
  typeConflict: 20,
  warning: 15,
  notice: 5,
} as const;

/** An invalid policy never scores above this. */
export const INVALID_SCORE_CAP = 40;

type Group = 'number' | 'string' | 'array';

interface Bound {
  value: number;
  exclusive: boolean;
  field: string;
}

interface ArgumentSummary {
  groups: Map<Group, string>; // group -> first field that needs it
  lower: Bound | null;
  upper: Bound | null;
  minLength: number | null;
  maxLength: number | null;
  minItems: number | null;
  maxItems: number | null;
  enums: string[][];
  notEnum: Set<string>;
}

const NUMBER_FIELDS = [
  'minimum',
  'maximum',
  'greaterThan',
  'lessThan',
  'greaterThanOrEqual',
  'lessThanOrEqual',
];
const STRING_FIELDS = ['minLength', 'maxLength', 'enum', 'notEnum', 'regex', 'notRegex'];
const ARRAY_FIELDS = ['minItems', 'maxItems'];

class Collector {
  readonly issues: string[] = [];
  penalty = 0;
  contradictions = 0;
  add(text: string, penalty: number, contradiction = false): void {
    this.issues.push(text);
    this.penalty += penalty;
    if (contradiction) this.contradictions++;
  }
}

function raise(current: Bound | null, next: Bound): Bound {
  if (!current || next.value > current.value || (next.value === current.value && next.exclusive)) return next;
  return current;
}

function lowerMost(current: Bound | null, next: Bound): Bound {
  if (!current || next.value < current.value || (next.value === current.value && next.exclusive)) return next;
  return current;
}

function summarise(constraints: Constraint[]): Map<string, ArgumentSummary> {
  const byArg = new Map<string, ArgumentSummary>();
  for (const c of constraints) {
    let s = byArg.get(c.argumentName);
    if (!s) {
      s = {
        groups: new Map(),
        lower: null,
        upper: null,
        minLength: null,
        maxLength: null,
        minItems: null,
        maxItems: null,
        enums: [],
        notEnum: new Set(),
      };
      byArg.set(c.argumentName, s);
    }
    const fields = c as unknown as Record<string, unknown>;
    for (const [group, list] of [
      ['number', NUMBER_FIELDS],
      ['string', STRING_FIELDS],
      ['array', ARRAY_FIELDS],
    ] as const) {
      const field = list.find((f) => isSet(fields[f]));
      if (field && !s.groups.has(group)) s.groups.set(group, field);
    }
    for (const field of ['minimum', 'greaterThanOrEqual', 'greaterThan']) {
      const v = fields[field];
      if (isSet(v))
        s.lower = raise(s.lower, { value: v as number, exclusive: field === 'greaterThan', field });
    }
    for (const field of ['maximum', 'lessThanOrEqual', 'lessThan']) {
      const v = fields[field];
      if (isSet(v))
        s.upper = lowerMost(s.upper, { value: v as number, exclusive: field === 'lessThan', field });
    }
    if (isSet(c.minLength)) s.minLength = Math.max(s.minLength ?? 0, c.minLength as number);
    if (isSet(c.maxLength))
      s.maxLength = Math.min(s.maxLength ?? Number.POSITIVE_INFINITY, c.maxLength as number);
    if (isSet(c.minItems)) s.minItems = Math.max(s.minItems ?? 0, c.minItems as number);
    if (isSet(c.maxItems))
      s.maxItems = Math.min(s.maxItems ?? Number.POSITIVE_INFINITY, c.maxItems as number);
    if (isSet(c.enum)) s.enums.push(c.enum as string[]);
    for (const v of c.notEnum ?? []) s.notEnum.add(v);
  }
  return byArg;
}

function checkContradictions(name: string, s: ArgumentSummary, out: Collector): void {
  const { lower, upper } = s;
  if (lower && upper) {
    const empty =
      lower.value > upper.value || (lower.value === upper.value && (lower.exclusive || upper.exclusive));
    if (empty) {
      out.add(
        `"${name}": ${lower.field} ${lower.value} and ${upper.field} ${upper.value} leave no number that can pass.`,
        PENALTY.contradiction,
        true,
      );
    }
  }
  if (s.minLength !== null && s.maxLength !== null && s.minLength > s.maxLength) {
    out.add(
      `"${name}": minLength ${s.minLength} is above maxLength ${s.maxLength}.`,
      PENALTY.contradiction,
      true,
    );
  }
  if (s.minItems !== null && s.maxItems !== null && s.minItems > s.maxItems) {
    out.add(
      `"${name}": minItems ${s.minItems} is above maxItems ${s.maxItems}.`,
      PENALTY.contradiction,
      true,
    );
  }
  if (s.groups.size > 1) {
    const needs = [...s.groups].map(([group, field]) => `${field} needs a ${group}`).join(', ');
    out.add(`"${name}": ${needs}; no value can pass all of them.`, PENALTY.contradiction, true);
  }
  if (s.enums.some((list) => list.length === 0)) {
    out.add(`"${name}": enum is empty, so no value can pass.`, PENALTY.contradiction, true);
    return;
  }
  if (s.enums.length === 0) return;
  let allowed = new Set(s.enums[0]);
  for (const list of s.enums.slice(1)) allowed = new Set(list.filter((v) => allowed.has(v)));
  if (allowed.size === 0) {
    out.add(
      `"${name}": its enum lists have no value in common, so no value can pass.`,
      PENALTY.contradiction,
      true,
    );
    return;
  }
  const both = [...allowed].filter((v) => s.notEnum.has(v));
  if (both.length > 0) {
    const values = both.map((v) => show(v)).join(', ');
    out.add(`"${name}": ${values} is both in enum and in notEnum.`, PENALTY.contradiction, true);
  }
}

const CHECK_FIELDS = CONSTRAINT_FIELDS.filter(
  (f) => f !== 'argumentName' && f !== 'enabled' && f !== 'action',
);

function checksSomething(c: Constraint): boolean {
  const fields = c as unknown as Record<string, unknown>;
  return CHECK_FIELDS.some((f) => isSet(fields[f]) && fields[f] !== false);
}

function checkConstraintShape(c: Constraint, index: number, out: Collector): void {
  const label = `Constraint ${index + 1} on "${c.argumentName}"`;
  const fields = c as unknown as Record<string, unknown>;
  const known: readonly string[] = CONSTRAINT_FIELDS;
  for (const key of Object.keys(fields)) {
    if (!known.includes(key))
      out.add(`${label} has an unknown field "${key}"; it is ignored.`, PENALTY.warning);
  }
  if (c.enabled === false) return;
  if (!checksSomething(c)) out.add(`${label} checks nothing.`, PENALTY.notice);
  if (c.regex === '')
    out.add(`${label}: an empty regex matches every string, so it restricts nothing.`, PENALTY.notice);
  if (c.notRegex === '') {
    out.add(
      `${label}: an empty notRegex matches every string, so every string is denied.`,
      PENALTY.contradiction,
      true,
    );
  }
  for (const field of ['regex', 'notRegex'] as const) {
    const cost = isSet(c[field]) ? regexCost(c[field]) : null;
    if (cost && cost.maxInput < MIB) {
      // More instructions than a pattern has characters: counted repetition. Otherwise a short
      // program whose search automaton is too large to build ahead (`a.{20}$`).
      const why =
        cost.programSize > MAX_REGEX_LENGTH
          ? 'compiles to a large program'
          : 'needs a large search automaton';
      out.add(
        `${label}: the ${field} pattern ${why}, so strings longer than ${cost.maxInput} characters (UTF-16 code units) are denied without being checked.`,
        PENALTY.notice,
      );
    }
  }
}

/** The largest request body: a pattern that meets strings this long meets every string a call can carry. */
const MIB = 1 << 20;

function declaredType(tool: ToolArgument[], name: string): ArgType | 'undeclared' | 'nested' {
  const exact = tool.find((a) => a.name === name);
  if (exact) return exact.type;
  const head = name.split('.')[0];
  const parent = name.includes('.') ? tool.find((a) => a.name === head) : undefined;
  return parent && (parent.type === 'object' || parent.type === 'array') ? 'nested' : 'undeclared';
}

function checkAgainstTool(
  byArg: Map<string, ArgumentSummary>,
  def: PolicyDefinition,
  tool: ToolArgument[],
  out: Collector,
): void {
  for (const [name, s] of byArg) {
    const type = declaredType(tool, name);
    if (type === 'undeclared') {
      out.add(`A constraint targets "${name}", which the registered tool does not declare.`, PENALTY.warning);
      continue;
    }
    if (type === 'nested') continue;
    for (const [group, field] of s.groups) {
      if (group !== type) {
        out.add(
          `"${name}": ${field} needs a ${group}, but the tool declares it as ${type}; every call carrying it would be denied.`,
          PENALTY.typeConflict,
        );
      }
    }
  }
  for (const limit of def.sessionConstraints?.cumulativeLimits ?? []) {
    const type = declaredType(tool, limit.argumentName);
    if (type === 'undeclared') {
      out.add(
        `A cumulative limit targets "${limit.argumentName}", which the registered tool does not declare.`,
        PENALTY.warning,
      );
    } else if (type !== 'nested' && type !== 'number') {
      out.add(
        `The cumulative limit on "${limit.argumentName}" needs a number, but the tool declares it as ${type}.`,
        PENALTY.typeConflict,
      );
    }
  }
}

function checkSession(def: PolicyDefinition, out: Collector): void {
  const sc = def.sessionConstraints;
  if (!sc) return;
  if (sc.maxCalls === 0)
    out.add('sessionConstraints.maxCalls is 0, so every call is denied.', PENALTY.warning);
  const seen = new Set<string>();
  for (const limit of sc.cumulativeLimits ?? []) {
    if (seen.has(limit.argumentName)) {
      out.add(
        `"${limit.argumentName}" has more than one cumulative limit; the lowest one decides.`,
        PENALTY.notice,
      );
    }
    seen.add(limit.argumentName);
    if (limit.maxValue < 0) {
      // Values below 0 are refused and a total of 0 is still over a negative limit.
      out.add(
        `The cumulative limit on "${limit.argumentName}" is ${limit.maxValue}, so every call carrying it is denied.`,
        PENALTY.warning,
      );
    } else if (limit.maxValue === 0) {
      out.add(
        `The cumulative limit on "${limit.argumentName}" is 0, so only zero values can pass.`,
        PENALTY.warning,
      );
    }
  }
}

function constrainsSomething(def: PolicyDefinition): boolean {
  const sc = def.sessionConstraints;
  if (sc && (isSet(sc.maxCalls) || (sc.cumulativeLimits?.length ?? 0) > 0)) return true;
  return (def.constraints ?? []).some((c) => c.enabled !== false && checksSomething(c));
}

/**
 * Scores a policy 0-100 and lists its issues as plain sentences. `valid` is false when the definition
 * has hard problems (score 0) or contradictions (score capped at 40). Each issue subtracts its penalty.
 */
export function scorePolicy(
  def: PolicyDefinition,
  tool?: { arguments: ToolArgument[] } | null,
): QualityReport {
  const problems = checkPolicyDefinition(def);
  if (problems.length > 0) return { valid: false, score: 0, issues: problems };

  const out = new Collector();
  const constraints = def.constraints ?? [];
  constraints.forEach((c, i) => {
    checkConstraintShape(c, i, out);
  });
  const byArg = summarise(constraints.filter((c) => c.enabled !== false));
  for (const [name, s] of byArg) checkContradictions(name, s, out);
  if (tool && Array.isArray(tool.arguments)) checkAgainstTool(byArg, def, tool.arguments, out);
  checkSession(def, out);

  if (def.mode === 'llm') {
    if (!def.llmConfig?.description?.trim()) {
      // A policy that states no rule cannot be judged: it is invalid, not merely weak.
      out.add(
        'The llm policy has an empty description, so it states no rule.',
        PENALTY.emptyLlmDescription,
        true,
      );
    }
    if (constraints.length > 0) out.add('Constraints are ignored in llm mode.', PENALTY.notice);
  } else {
    if (isSet(def.llmConfig)) out.add('llmConfig is ignored in deterministic mode.', PENALTY.notice);
    if (!constrainsSomething(def)) {
      out.add(
        'The policy constrains nothing (no enabled constraint and no session limit), so every call is allowed.',
        PENALTY.constrainsNothing,
      );
    }
  }

  const valid = out.contradictions === 0;
  let score = Math.max(0, 100 - out.penalty);
  if (!valid) score = Math.min(score, INVALID_SCORE_CAP);
  return { valid, score, issues: out.issues };
}
