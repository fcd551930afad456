import { APPROVALS_NEED_TEAM, approvalsAllowed } from '../approvals/model.js';
import type { ApprovalService } from '../approvals/service.js';
import type { CallScope, Decided, ToolCall, UsedApproval } from './service.js';

type Outcome = Omit<Decided, 'session' | 'sessionId' | 'approval'>;

function approvalIdOf(context: Record<string, unknown>): string | null {
  const id = context.approval_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/**
 * What human approval makes of a policy outcome, before session limits. A call presenting
 * context.approval_id is allowed if that approval is approved, unused and was granted for this tool
 * and these exact arguments (the use is claimed atomically); any other approval denies it, fail
 * closed. A hard deny of the policy stands either way, and the approval is then not used; a call
 * the policy allows anyway ignores the approval (it is neither checked nor used). Without
 * an approval id, require_approval stands only on plans that have approvals.
 */
export async function applyApprovals(
  outcome: Outcome,
  scope: CallScope,
  call: ToolCall,
  approvals: Pick<ApprovalService, 'use'>,
): Promise<{ outcome: Outcome; approval: UsedApproval | null }> {
  const approvalId = approvalIdOf(call.context);
  if (approvalId === null) {
    if (outcome.decision !== 'require_approval' || approvalsAllowed(scope.tier)) {
      return { outcome, approval: null };
    }
    const reason = `${outcome.reason}: human approval is required, but ${APPROVALS_NEED_TEAM}; denied`;
    return { outcome: { ...outcome, decision: 'deny', reason }, approval: null };
  }
  if (outcome.decision === 'deny') {
    const reason = `${outcome.reason}; approval ${approvalId} was not applied because the policy denies this call`;
    return { outcome: { ...outcome, reason }, approval: null };
  }
  // Allowed without it: the approval is ignored and stays unused for the call that needs it.
  if (outcome.decision !== 'require_approval') return { outcome, approval: null };
  const use = await approvals.use(scope.organizationId, approvalId, call);
  if (!use.ok)
    return { outcome: { ...outcome, decision: 'deny', reason: `Denied: ${use.reason}` }, approval: null };
  return {
    outcome: {
      ...outcome,
      decision: 'allow',
      reason: `Allowed: approval ${approvalId} was approved by ${use.resolvedBy}`,
      failedConstraints: [],
      failedArgument: null,
    },
    approval: use,
  };
}
