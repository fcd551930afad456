/**
 * What the service would answer a call tried in the policy editor. The browser evaluates the
 * definition with the service's policy engine; the service then applies what the engine does not
 * know: an inactive policy lets calls through unchecked, and on a plan below Team a call that
 * requires approval is denied (there are no approvals to open).
 */
import {
  APPROVALS_NEED_TEAM,
  approvalsAllowed,
  deniedWithoutApprovals,
  type Evaluation,
} from '@svc/policy-engine';

export interface DryRunAnswer {
  /** The decision the service would answer. */
  decision: Evaluation['decision'];
  reason: string | null;
  /** Why it differs from the policy's own verdict, or what it depends on; null when nothing. */
  note: string | null;
  /**
   * The policy's constraints' verdict (with the plan's rule applied) when the service does not check
   * them now (the policy is inactive): what it would answer once the policy is active; else null.
   */
  whenActive: { decision: Evaluation['decision']; reason: string | null } | null;
}

/**
 * The answer the service would give, from the engine's `evaluation` of the definition, for a policy
 * that is active or not (`isActive`; a policy not created yet is created active), in an organization
 * on plan `tier` (undefined when the page does not know it).
 */
export function serviceAnswer(
  evaluation: Pick<Evaluation, 'decision' | 'reason'>,
  { toolName, isActive, tier }: { toolName: string; isActive: boolean; tier: string | undefined },
): DryRunAnswer {
  let checked: Omit<DryRunAnswer, 'whenActive'> = { ...evaluation, note: null };
  if (evaluation.decision === 'require_approval') {
    if (tier === undefined) {
      checked = {
        ...checked,
        note: `On plans below Team the service denies this call instead: ${APPROVALS_NEED_TEAM}.`,
      };
    } else if (!approvalsAllowed(tier)) {
      checked = {
        decision: 'deny',
        reason: deniedWithoutApprovals(evaluation.reason ?? 'Approval required'),
        note: `Denied rather than sent for approval: the organization's plan is ${tier}, and ${APPROVALS_NEED_TEAM}.`,
      };
    }
  }
  if (isActive) return { ...checked, whenActive: null };
  return {
    decision: 'allow',
    reason: `Policy for tool "${toolName}" is inactive; allowed without checks`,
    note: 'The policy is inactive: the service allows every call to this tool without checking it. Below, what it would answer once the policy is active.',
    whenActive: { decision: checked.decision, reason: checked.reason },
  };
}
