import { approvalsAllowed, deniedWithoutApprovals } from '@svc/policy-engine';
import { uuidv7 } from '../../lib/ids.js';
import type { ApprovalService } from '../../modules/approvals/service.js';
import type { Step, StepResult } from '../model.js';
import { NOT_EVALUATED } from './constraints.js';

function approvalIdOf(context: Record<string, unknown>): string | null {
  const id = context.approval_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/**
 * What human approval makes of a policy outcome, before session limits. A call presenting
 * context.approval_id is allowed if that approval is approved, unused and was granted for this tool
 * and these exact arguments (the use is claimed atomically and held until the decision is durable);
 * any other approval denies it, fail closed. A hard deny of the policy stands either way, and the
 * approval is then not used; a call the policy allows anyway ignores the approval (it is neither
 * checked nor used). Without an approval id, require_approval stands only on plans that have
 * approvals, and the approval it asks for is opened once the decision is durable.
 */
export function approvalsStep(approvals: Pick<ApprovalService, 'use' | 'open'>): Step {
  return {
    name: 'approvals',
    async run({ scope, call }, verdict): Promise<StepResult> {
      const approvalId = approvalIdOf(call.context);
      if (approvalId === null) {
        if (verdict.decision !== 'require_approval') return { verdict };
        if (!approvalsAllowed(scope.tier)) {
          const reason = deniedWithoutApprovals(verdict.reason);
          return { verdict: { ...verdict, decision: 'deny', reason } };
        }
        // Preassigned so the decision's receipt binds the approval it opens.
        const id = uuidv7();
        return {
          verdict: { ...verdict, approvalId: id },
          hold: {
            // Opened only once the decision is durable; if this fails the caller answers 503 and
            // the client validates again, getting a fresh decision and approval.
            commit: async (decisionId) => {
              await approvals.open(scope, {
                id,
                decisionId,
                toolName: call.toolName,
                arguments: call.arguments,
                requestedByKeyId: scope.keyId ?? null,
                requestedByLineageId: scope.keyLineageId ?? null,
                requestedByKeyCreator: scope.keyCreator ?? null,
              });
            },
            release: () => {},
          },
        };
      }
      if (verdict.decision === 'deny') {
        const reason = `${verdict.reason}; approval ${approvalId} was not applied because the policy denies this call`;
        return { verdict: { ...verdict, reason } };
      }
      // Allowed without it: the approval is ignored and stays unused for the call that needs it.
      if (verdict.decision !== 'require_approval') return { verdict };
      const use = await approvals.use(scope.organizationId, approvalId, call, scope.projectId);
      if (!use.ok) return { verdict: { ...verdict, decision: 'deny', reason: `Denied: ${use.reason}` } };
      return {
        verdict: {
          ...verdict,
          decision: 'allow',
          reason: `Allowed: approval ${approvalId} was approved by ${use.resolvedBy}`,
          failedConstraints: [],
          failedArgument: null,
          // Session limits still apply; their failures are then the only ones reported.
          evaluation: NOT_EVALUATED,
          approvalId,
        },
        hold: {
          commit: () => {},
          // Not recorded means not decided: the approval is given back, unless the tool already ran.
          release: async (ran) => {
            if (!ran) await use.release();
          },
        },
      };
    },
  };
}
