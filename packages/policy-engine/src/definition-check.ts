import { show as shown } from './format.js';
import { regexProblem } from './regex.js';
import type { PolicyDefinition } from './types.js';

/** Constraint fields this engine understands; anything else is reported by scorePolicy. */
export const CONSTRAINT_FIELDS = [
  'argumentName',
  'enabled',
  'required',
  'notNull',
  'minimum',
  'maximum',
  'greaterThan',
  'lessThan',
  'greaterThanOrEqual',
  'lessThanOrEqual',
  'minLength',
  'maxLength',
  'enum',
  'notEnum',
  'regex',
  'notRegex',
  'minItems',
  'maxItems',
  'action',
] as const;

const BOOLEAN_FIELDS = ['enabled', 'required', 'notNull'] as const;
const NUMBER_FIELDS = [
  'minimum',
  'maximum',
  'greaterThan',
  'lessThan',
  'greaterThanOrEqual',
  'lessThanOrEqual',
] as const;
const COUNT_FIELDS = ['minLength', 'maxLength', 'minItems', 'maxItems'] as const;
const LIST_FIELDS = ['enum', 'notEnum'] as const;
const REGEX_FIELDS = ['regex', 'notRegex'] as const;
const MODELS = ['openai', 'anthropic', 'google'];

type Loose = Record<string, unknown>;

/** null is accepted as "not set" for every optional field: JSON clients often send it. */
export function isSet(value: unknown): boolean {
  return value !== undefined && value !== null;
}

function isObject(value: unknown): value is Loose {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((v) => typeof v === 'string');
}

/**
 * Hard errors that make a policy unwritable (the server answers 400 with them). Regexes are compiled
 * here so that evaluation never meets a bad pattern. Disabled constraints are checked too, so enabling
 * one later cannot break the policy.
 */
export function checkPolicyDefinition(def: PolicyDefinition): string[] {
  const problems: string[] = [];
  const raw: unknown = def;
  if (!isObject(raw)) return ['The policy definition must be an object.'];
  if (raw.mode !== 'deterministic' && raw.mode !== 'llm') {
    problems.push(`mode must be "deterministic" or "llm" (got ${shown(raw.mode)}).`);
  }
  if (isSet(raw.constraints)) {
    if (!Array.isArray(raw.constraints)) problems.push('constraints must be an array.');
    else {
      raw.constraints.forEach((c, i) => {
        checkConstraint(c, i, problems);
      });
    }
  }
  if (isSet(raw.sessionConstraints)) checkSession(raw.sessionConstraints, problems);
  if (isSet(raw.llmConfig)) checkLlm(raw.llmConfig, problems);
  return problems;
}

function checkConstraint(c: unknown, index: number, problems: string[]): void {
  if (!isObject(c)) {
    problems.push(`Constraint ${index + 1} must be an object.`);
    return;
  }
  const name = c.argumentName;
  if (typeof name !== 'string' || name.length === 0) {
    problems.push(`Constraint ${index + 1} needs an argumentName (a non-empty string).`);
  }
  const label =
    typeof name === 'string' && name ? `Constraint ${index + 1} on "${name}"` : `Constraint ${index + 1}`;
  for (const field of BOOLEAN_FIELDS) {
    if (isSet(c[field]) && typeof c[field] !== 'boolean') {
      problems.push(`${label}: ${field} must be true or false (got ${shown(c[field])}).`);
    }
  }
  for (const field of NUMBER_FIELDS) {
    const v = c[field];
    if (isSet(v) && (typeof v !== 'number' || !Number.isFinite(v))) {
      problems.push(`${label}: ${field} must be a finite number (got ${shown(v)}).`);
    }
  }
  for (const field of COUNT_FIELDS) {
    const v = c[field];
    if (isSet(v) && (typeof v !== 'number' || !Number.isInteger(v) || v < 0)) {
      problems.push(`${label}: ${field} must be a whole number of 0 or more (got ${shown(v)}).`);
    }
  }
  for (const field of LIST_FIELDS) {
    if (isSet(c[field]) && !isStringArray(c[field])) {
      problems.push(`${label}: ${field} must be an array of strings.`);
    }
  }
  for (const field of REGEX_FIELDS) {
    if (!isSet(c[field])) continue;
    const problem = regexProblem(c[field]);
    if (problem) problems.push(`${label}: ${field} cannot be used: ${problem}.`);
  }
  if (isSet(c.action) && c.action !== 'deny' && c.action !== 'require_approval') {
    problems.push(`${label}: action must be "deny" or "require_approval" (got ${shown(c.action)}).`);
  }
}

function checkSession(sc: unknown, problems: string[]): void {
  if (!isObject(sc)) {
    problems.push('sessionConstraints must be an object.');
    return;
  }
  const max = sc.maxCalls;
  if (isSet(max) && (typeof max !== 'number' || !Number.isInteger(max) || max < 0)) {
    problems.push(`sessionConstraints.maxCalls must be a whole number of 0 or more (got ${shown(max)}).`);
  }
  if (!isSet(sc.cumulativeLimits)) return;
  if (!Array.isArray(sc.cumulativeLimits)) {
    problems.push('sessionConstraints.cumulativeLimits must be an array.');
    return;
  }
  sc.cumulativeLimits.forEach((limit, i) => {
    const label = `Cumulative limit ${i + 1}`;
    if (!isObject(limit)) {
      problems.push(`${label} must be an object.`);
      return;
    }
    if (typeof limit.argumentName !== 'string' || limit.argumentName.length === 0) {
      problems.push(`${label} needs an argumentName (a non-empty string).`);
    }
    const v = limit.maxValue;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      const on = typeof limit.argumentName === 'string' ? ` on "${limit.argumentName}"` : '';
      problems.push(`${label}${on}: maxValue must be a finite number (got ${shown(v)}).`);
    }
  });
}

function checkLlm(cfg: unknown, problems: string[]): void {
  if (!isObject(cfg)) {
    problems.push('llmConfig must be an object.');
    return;
  }
  if (isSet(cfg.description) && typeof cfg.description !== 'string') {
    problems.push('llmConfig.description must be a string.');
  }
  if (isSet(cfg.exceptions) && !isStringArray(cfg.exceptions)) {
    problems.push('llmConfig.exceptions must be an array of strings.');
  }
  if (isSet(cfg.argumentInstructions)) {
    const list = cfg.argumentInstructions;
    const ok =
      Array.isArray(list) &&
      list.every(
        (item) =>
          isObject(item) && typeof item.argumentName === 'string' && typeof item.instruction === 'string',
      );
    if (!ok) {
      problems.push(
        'llmConfig.argumentInstructions must be an array of {argumentName, instruction} strings.',
      );
    }
  }
  if (isSet(cfg.preferredModel) && !MODELS.includes(cfg.preferredModel as string)) {
    problems.push(
      `llmConfig.preferredModel must be one of ${MODELS.join(', ')} (got ${shown(cfg.preferredModel)}).`,
    );
  }
}
