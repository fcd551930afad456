import { type Evaluation, evaluate } from '@svc/policy-engine';
import type { LoadedPolicy } from '../../modules/policies/cache.js';
import type { Step, Verdict } from '../model.js';

/** Stands in for the policy's evaluation where it no longer counts (no active policy, approved call). */
export const NOT_EVALUATED: Evaluation = {
  decision: 'allow',
  reason: null,
  failedConstraints: [],
  failedArgument: null,
};

/** The verdict a policy evaluation gives. */
export function verdictOf(e: Evaluation, policy: LoadedPolicy): Verdict {
  return {
    decision: e.decision,
    reason: e.reason ?? 'Allowed: every constraint is satisfied',
    failedConstraints: e.failedConstraints,
    failedArgument: e.failedArgument,
    mode: policy.mode,
    evaluation: e,
    approvalId: null,
  };
}

/** The verdict before any check: allowed, and the answer says why nothing was checked. */
export function uncheckedVerdict(toolName: string, policy: LoadedPolicy | null): Verdict {
  return {
    decision: 'allow',
    reason: policy
      ? `Policy for tool "${toolName}" is inactive; allowed without checks`
      : `No policy for tool "${toolName}"; allowed without checks`,
    failedConstraints: [],
    failedArgument: null,
    // Nothing judged the call, whatever mode an inactive policy has: it binds no policy either.
    mode: 'deterministic',
    evaluation: NOT_EVALUATED,
    approvalId: null,
  };
}

/** The policy's argument constraints, evaluated by the policy engine (pure, synchronous). */
export const constraintsStep: Step = {
  name: 'constraints',
  run({ call, policy }, verdict) {
    if (!policy) return { verdict };
    return { verdict: verdictOf(evaluate(policy.compiled, call.arguments), policy) };
  },
};
