import { type Evaluation, evaluate, type FailedConstraint, mergeEvaluation } from '@svc/policy-engine';
import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import { uuidv7 } from '../../lib/ids.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import type { ApprovalService, ApprovalUse } from '../approvals/service.js';
import type { DecisionWriter } from '../decisions/writer.js';
import type { LoadedPolicy, PolicyCache } from '../policies/cache.js';
import {
  argumentHash,
  type Receipt,
  type ReceiptFields,
  type ReceiptSummary,
  receiptSummary,
} from '../receipts/receipt.js';
import { applyApprovals } from './escalation.js';
import type { Reservation, SessionCounters } from './sessions.js';

export type DecisionValue = 'allow' | 'deny' | 'require_approval';

export interface ToolCall {
  toolName: string;
  arguments: Record<string, unknown>;
  context: Record<string, unknown>;
}

export interface CallScope {
  organizationId: string;
  projectId: string | null;
  /** The organization's billing tier: a free organization gets no human approvals. */
  tier: string;
  /** The API key making the call; an approval it opens cannot be resolved by that key. */
  keyId?: string | null;
}

/** The scope of a call made with an API key: its organization, project, tier and the key itself. */
export function callScopeOf(key: KeyPrincipal): CallScope {
  return { organizationId: key.organizationId, projectId: key.projectId, tier: key.tier, keyId: key.keyId };
}

/** An approved approval this call used (context.approval_id). */
export type UsedApproval = Extract<ApprovalUse, { ok: true }>;

/** A decision taken but not yet recorded. */
export interface Decided {
  decision: DecisionValue;
  reason: string;
  failedConstraints: readonly FailedConstraint[];
  failedArgument: string | null;
  mode: 'deterministic' | 'llm';
  policy: LoadedPolicy | null;
  session: Reservation | null;
  sessionId: string | null;
  /** Set when the call was allowed under an approval; given back if the decision is not recorded. */
  approval?: UsedApproval | null;
}

export interface Recorded {
  decisionId: string;
  receipt: ReceiptSummary;
  /** The approval opened for a `require_approval` decision, else null. */
  approvalId: string | null;
}

export interface RecordOptions {
  source: 'server' | 'client';
  latencyMs: number;
  /**
   * The tool already ran (the MCP gateway records after the upstream call): a failed record then
   * keeps the session reservation and the used approval (they were spent) instead of giving them back.
   */
  ran?: boolean;
  /** Extra receipt bindings (MCP: result_hash, client_id, connection_id, upstream_id). */
  receiptExtras?: Partial<Pick<ReceiptFields, 'result_hash' | 'client_id' | 'connection_id' | 'upstream_id'>>;
}

export interface ValidationServiceDeps {
  policies: PolicyCache;
  sessions: SessionCounters;
  writer: DecisionWriter;
  events: EventBus;
  clock: Clock;
  approvals: Pick<ApprovalService, 'open' | 'use'>;
}

function sessionIdOf(context: Record<string, unknown>): string | null {
  const id = context.session_id;
  if (typeof id === 'string' && id !== '') return id;
  if (typeof id === 'number' && Number.isFinite(id)) return String(id);
  return null;
}

function withoutSource(context: Record<string, unknown>): Record<string, unknown> {
  const { source: _source, ...rest } = context;
  return rest;
}

/** Stands in for the policy's evaluation where it no longer counts (no active policy, approved call). */
const NOT_EVALUATED: Evaluation = {
  decision: 'allow',
  reason: null,
  failedConstraints: [],
  failedArgument: null,
};

/** No active policy: allowed without checks, and the answer says why. */
function unchecked(toolName: string, policy: LoadedPolicy | null): Omit<Decided, 'session' | 'sessionId'> {
  return {
    decision: 'allow',
    reason: policy
      ? `Policy for tool "${toolName}" is inactive; allowed without checks`
      : `No policy for tool "${toolName}"; allowed without checks`,
    failedConstraints: [],
    failedArgument: null,
    mode: policy?.mode ?? 'deterministic',
    policy,
  };
}

function fromEvaluation(e: Evaluation, policy: LoadedPolicy): Omit<Decided, 'session' | 'sessionId'> {
  return {
    decision: e.decision,
    reason: e.reason ?? 'Allowed: every constraint is satisfied',
    failedConstraints: e.failedConstraints,
    failedArgument: e.failedArgument,
    mode: policy.mode,
    policy,
  };
}

/**
 * Decides a tool call against its organization's policy, then records the decision and its receipt.
 * decide() and record() are separate because the MCP gateway records only after the upstream tool
 * ran, binding its result into the receipt.
 */
export function createValidationService({
  policies,
  sessions,
  writer,
  events,
  clock,
  approvals,
}: ValidationServiceDeps) {
  return {
    async decide(scope: CallScope, call: ToolCall): Promise<Decided> {
      const sessionId = sessionIdOf(call.context);
      const policy = await policies.get(scope.organizationId, call.toolName);
      const active = policy?.isActive ? policy : null;
      const evaluation = active ? evaluate(active.compiled, call.arguments) : NOT_EVALUATED;
      const { outcome, approval } = await applyApprovals(
        active ? fromEvaluation(evaluation, active) : unchecked(call.toolName, policy),
        scope,
        call,
        approvals,
      );
      const sc = active?.definition.sessionConstraints;
      const hasSessionLimits = !!sc && (sc.maxCalls !== undefined || (sc.cumulativeLimits?.length ?? 0) > 0);
      if (outcome.decision !== 'allow' || !hasSessionLimits) {
        return { ...outcome, session: null, sessionId, approval };
      }
      // Session limits apply to approved calls too; a refused call gives its approval back.
      const base = approval ? NOT_EVALUATED : evaluation;
      const refuse = async (failures: FailedConstraint[]): Promise<Decided> => {
        // A failed give-back must not turn the refusal into an error.
        await approval?.release().catch(() => {});
        return { ...fromEvaluation(mergeEvaluation(base, failures), active!), session: null, sessionId };
      };
      if (!sessionId) {
        return refuse([
          {
            parameter: 'context.session_id',
            constraint_type: 'required',
            expected: 'a session id in context.session_id',
            actual: null,
            message: 'this policy has session limits; context.session_id is required',
          },
        ]);
      }
      let reservation: Reservation;
      try {
        reservation = await sessions.reserve(
          scope.organizationId,
          sessionId,
          call.toolName,
          sc!,
          call.arguments,
        );
      } catch (err) {
        await approval?.release().catch(() => {});
        throw err;
      }
      if (reservation.failures.length > 0) return refuse(reservation.failures);
      return { ...outcome, session: reservation, sessionId, approval };
    },

    /** Commits the decision and its receipt durably; resolves only after COMMIT. */
    async record(
      scope: CallScope,
      call: ToolCall,
      decided: Decided,
      options: RecordOptions,
    ): Promise<Recorded> {
      const decisionId = uuidv7();
      const now = clock.now().toISOString();
      // context.source says `client` only for client-reported decisions; a caller cannot claim it.
      const context =
        options.source === 'client'
          ? { ...call.context, source: 'client' }
          : call.context.source === 'client'
            ? withoutSource(call.context)
            : call.context;
      const session = decided.session;
      // Preassigned so the decision's receipt binds the approval it opens (or the one it used).
      const approvalId = decided.decision === 'require_approval' ? uuidv7() : null;
      const boundApproval = approvalId ?? decided.approval?.approvalId;
      let receipt: Receipt;
      try {
        receipt = await writer.write({
          receipt: {
            organization_id: scope.organizationId,
            project_id: scope.projectId,
            decision_id: decisionId,
            decision: decided.decision,
            mode: decided.mode,
            tool_name: call.toolName,
            argument_hash: argumentHash(call.arguments),
            policy_version: decided.policy?.version ?? null,
            policy_hash: decided.policy?.hash ?? null,
            reason: decided.reason,
            timestamp: now,
            ...(options.source === 'client' ? { source: 'client' } : {}),
            ...(boundApproval ? { approval_id: boundApproval } : {}),
            ...options.receiptExtras,
          },
          decision: {
            id: decisionId,
            organization_id: scope.organizationId,
            project_id: scope.projectId,
            tool_name: call.toolName,
            arguments: JSON.stringify(call.arguments),
            context: JSON.stringify(context),
            decision: decided.decision,
            mode: decided.mode,
            reason: decided.reason,
            failed_argument: decided.failedArgument,
            matched_exception: null,
            validations:
              decided.failedConstraints.length > 0 ? JSON.stringify(decided.failedConstraints) : null,
            latency_ms: options.latencyMs,
            source: options.source,
            policy_version: decided.policy?.version ?? null,
            created_at: now,
          },
          ...(session?.after && decided.sessionId
            ? {
                session: {
                  organization_id: scope.organizationId,
                  session_id: decided.sessionId,
                  tool_name: call.toolName,
                  calls: session.after.calls,
                  cumulative: JSON.stringify(session.after.cumulative),
                  updated_at: now,
                },
              }
            : {}),
        });
      } catch (err) {
        if (options.ran) {
          // The tool already ran: the counted call and the approval were spent either way.
          session?.settle();
        } else {
          // Not recorded means not decided: the counted call and the used approval are given back.
          session?.release();
          await decided.approval?.release().catch(() => {});
        }
        throw err;
      }
      session?.settle();
      events.publish({
        organizationId: scope.organizationId,
        type: 'decision.created',
        data: {
          decisionId,
          toolName: call.toolName,
          decision: decided.decision,
          mode: decided.mode,
          latencyMs: options.latencyMs,
          projectId: scope.projectId,
        },
      });
      // Opened only once the decision is durable; if this fails the caller answers 503 and the
      // client validates again, getting a fresh decision and approval.
      if (approvalId) {
        await approvals.open(scope, {
          id: approvalId,
          decisionId,
          toolName: call.toolName,
          arguments: call.arguments,
          requestedByKeyId: scope.keyId ?? null,
        });
      }
      return { decisionId, receipt: receiptSummary(receipt), approvalId };
    },
  };
}

export type ValidationService = ReturnType<typeof createValidationService>;
