import { type ConstraintCheck, compileConstraint } from './constraint-compiler.js';
import { checkPolicyDefinition } from './definition-check.js';
import { ALLOW, buildEvaluation, failure, unevaluable } from './failures.js';
import { typeName } from './lookup.js';
import type {
  Evaluation,
  FailedConstraint,
  PolicyDefinition,
  PolicyMode,
  SessionConstraints,
} from './types.js';

/** Thrown by compilePolicy when checkPolicyDefinition finds problems. */
export class PolicyDefinitionError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`Invalid policy definition: ${problems.join(' ')}`);
    this.name = 'PolicyDefinitionError';
    this.problems = problems;
  }
}

export interface CompiledPolicy {
  readonly mode: PolicyMode;
  readonly sessionConstraints: SessionConstraints | null;
  /** Use evaluate(compiled, args); this is the precompiled evaluator behind it. */
  readonly run: (args: Record<string, unknown>) => Evaluation;
}

export const LLM_UNAVAILABLE = 'LLM policy evaluation is not available: no model is configured';

// Fail closed: the server relies on llm policies being denied until a model evaluator exists.
const LLM_FAILURE: FailedConstraint = Object.freeze(
  failure('', 'mode', 'deterministic', 'llm', LLM_UNAVAILABLE),
);
const LLM_DENY: Evaluation = Object.freeze(
  buildEvaluation('deny', Object.freeze([LLM_FAILURE]) as FailedConstraint[]),
);

function runChecks(checks: ConstraintCheck[], denies: boolean[], names: string[]) {
  const n = checks.length;
  return (args: Record<string, unknown>): Evaluation => {
    if (args === null || args === undefined) args = {};
    else if (typeof args !== 'object' || Array.isArray(args)) {
      const actual = typeName(args);
      return buildEvaluation('deny', [
        failure('', 'type', 'object', actual, `arguments must be an object (got ${actual})`),
      ]);
    }
    let failures: FailedConstraint[] | null = null;
    let deny = false;
    for (let i = 0; i < n; i++) {
      let found: FailedConstraint[] | null;
      try {
        found = checks[i]!(args);
      } catch (error) {
        // A getter that throws, a hostile proxy...: the constraint cannot be evaluated, so deny.
        found = [unevaluable(names[i]!, error)];
        deny = true;
      }
      if (found === null) continue;
      if (denies[i]) deny = true;
      if (failures === null) failures = found;
      else for (const f of found) failures.push(f);
    }
    if (failures === null) return ALLOW;
    return buildEvaluation(deny ? 'deny' : 'require_approval', failures);
  };
}

/** Validates and precompiles a policy. Throws PolicyDefinitionError listing every problem. */
export function compilePolicy(def: PolicyDefinition): CompiledPolicy {
  const problems = checkPolicyDefinition(def);
  if (problems.length > 0) throw new PolicyDefinitionError(problems);
  const sessionConstraints = def.sessionConstraints ?? null;
  if (def.mode === 'llm') return Object.freeze({ mode: def.mode, sessionConstraints, run: () => LLM_DENY });

  const checks: ConstraintCheck[] = [];
  const denies: boolean[] = [];
  const names: string[] = [];
  for (const c of def.constraints ?? []) {
    if (c.enabled === false) continue;
    const check = compileConstraint(c);
    if (check === null) continue;
    checks.push(check);
    denies.push(c.action !== 'require_approval');
    names.push(c.argumentName);
  }
  return Object.freeze({ mode: def.mode, sessionConstraints, run: runChecks(checks, denies, names) });
}

/** Evaluates one call. Pure and synchronous; identical on the server and in the SDK. */
export function evaluate(compiled: CompiledPolicy, args: Record<string, unknown>): Evaluation {
  return compiled.run(args);
}
