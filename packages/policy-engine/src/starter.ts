import { isSet } from './definition-check.js';
import { regexProblem } from './regex.js';
import type { Constraint, PolicyDefinition, ToolArgument } from './types.js';

export interface StarterPolicy {
  definition: PolicyDefinition;
  /** Declarations that could not become constraints, as sentences; registration still succeeds. */
  skipped: string[];
}

function isFiniteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/**
 * The policy generated when a tool is registered: one constraint per argument that declares `required`,
 * `enum`, `minimum`, `maximum` or `pattern`. A declaration that would deny every call carrying the argument
 * (a number bound on a string argument, an unusable pattern, ...) is skipped and listed instead.
 */
export function starterPolicy(args: ToolArgument[]): StarterPolicy {
  const constraints: Constraint[] = [];
  const skipped: string[] = [];
  for (const arg of args ?? []) {
    if (!arg || typeof arg.name !== 'string' || arg.name.length === 0) {
      skipped.push('An argument without a name was ignored.');
      continue;
    }
    const name = arg.name;
    const c: Constraint = { argumentName: name, enabled: true };
    let checks = 0;
    if (arg.required === true) {
      c.required = true;
      checks++;
    }
    if (isSet(arg.enum)) {
      if (!Array.isArray(arg.enum) || !arg.enum.every((v) => typeof v === 'string')) {
        skipped.push(`"${name}": enum is not enforced: it is not a list of strings.`);
      } else if (arg.enum.length === 0) {
        skipped.push(`"${name}": enum is not enforced: it is empty.`);
      } else if (arg.type !== 'string') {
        skipped.push(
          `"${name}": enum is not enforced: it needs a string argument, but the argument is declared as ${arg.type}.`,
        );
      } else {
        c.enum = [...arg.enum];
        checks++;
      }
    }
    for (const field of ['minimum', 'maximum'] as const) {
      const v = arg[field];
      if (!isSet(v)) continue;
      if (!isFiniteNumber(v)) skipped.push(`"${name}": ${field} is not enforced: it is not a finite number.`);
      else if (arg.type !== 'number') {
        skipped.push(
          `"${name}": ${field} is not enforced: it needs a number argument, but the argument is declared as ${arg.type}.`,
        );
      } else {
        c[field] = v;
        checks++;
      }
    }
    if (isFiniteNumber(c.minimum) && isFiniteNumber(c.maximum) && c.minimum > c.maximum) {
      skipped.push(
        `"${name}": minimum and maximum are not enforced: minimum ${c.minimum} is above maximum ${c.maximum}.`,
      );
      delete c.minimum;
      delete c.maximum;
      checks -= 2;
    }
    if (isSet(arg.pattern)) {
      const problem = regexProblem(arg.pattern);
      if (problem) skipped.push(`"${name}": pattern is not enforced: ${problem}.`);
      else if (arg.type !== 'string') {
        skipped.push(
          `"${name}": pattern is not enforced: it needs a string argument, but the argument is declared as ${arg.type}.`,
        );
      } else {
        c.regex = arg.pattern as string;
        checks++;
      }
    }
    if (checks > 0) constraints.push(c);
  }
  return { definition: { mode: 'deterministic', constraints }, skipped };
}
