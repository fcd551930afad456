/* Policies in words: the review pages of the service and of the dashboard word them alike. */
import type { Constraint, PolicyDefinition } from './types.js';

const list = (vs: string[]) => vs.map((v) => `"${v}"`).join(', ');

/** One constraint in words: `"amount" at most 1000 (else a person approves)`. */
export function describeConstraint(c: Constraint): string {
  const parts: string[] = [];
  if (c.required) parts.push('is required');
  if (c.notNull) parts.push('is not null');
  const min = c.minimum ?? c.greaterThanOrEqual;
  const max = c.maximum ?? c.lessThanOrEqual;
  if (min !== undefined) parts.push(`is at least ${min}`);
  if (c.greaterThan !== undefined) parts.push(`is more than ${c.greaterThan}`);
  if (max !== undefined) parts.push(`is at most ${max}`);
  if (c.lessThan !== undefined) parts.push(`is less than ${c.lessThan}`);
  if (c.minLength !== undefined) parts.push(`has at least ${c.minLength} characters`);
  if (c.maxLength !== undefined) parts.push(`has at most ${c.maxLength} characters`);
  if (c.minItems !== undefined) parts.push(`has at least ${c.minItems} items`);
  if (c.maxItems !== undefined) parts.push(`has at most ${c.maxItems} items`);
  if (c.enum) parts.push(`is one of ${list(c.enum)}`);
  if (c.notEnum) parts.push(`is none of ${list(c.notEnum)}`);
  if (c.regex !== undefined) parts.push(`matches /${c.regex}/`);
  if (c.notRegex !== undefined) parts.push(`does not match /${c.notRegex}/`);
  const text = `"${c.argumentName}" ${parts.join(' and ') || 'has no check'}`;
  const suffix = c.action === 'require_approval' ? ' (otherwise a person approves the call)' : '';
  return `${text}${suffix}${c.enabled === false ? ' [disabled]' : ''}`;
}

/** A policy definition in plain sentences, one per line. */
export function describePolicy(def: PolicyDefinition): string[] {
  if (def.mode === 'llm') {
    const lines = [`Judged by a model against: "${def.llmConfig?.description ?? ''}"`];
    for (const e of def.llmConfig?.exceptions ?? []) lines.push(`Exception: ${e}`);
    return lines;
  }
  const lines = (def.constraints ?? []).map(describeConstraint);
  const s = def.sessionConstraints;
  if (s?.maxCalls !== undefined) lines.push(`At most ${s.maxCalls} calls per session`);
  for (const l of s?.cumulativeLimits ?? [])
    lines.push(`The total of "${l.argumentName}" per session is at most ${l.maxValue}`);
  if (lines.length === 0) lines.push('No rule: every call is allowed');
  return lines;
}
