import { type Evaluation, evaluate, type FailedConstraint, mergeEvaluation } from '@svc/policy-engine';
import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import { uuidv7 } from '../../lib/ids.js';
import type { DecisionWriter } from '../decisions/writer.js';
import type { LoadedPolicy, PolicyCache } from '../policies/cache.js';
import {
  argumentHash,
  type ReceiptFields,
  type ReceiptSummary,
  receiptSummary,
} from '../receipts/receipt.js';
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
}

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
}

export interface Recorded {
  decisionId: string;
  receipt: ReceiptSummary;
}

export interface RecordOptions {
  source: 'server' | 'client';
  latencyMs: number;
  /** Extra receipt bindings (MCP: result_hash, client_id, connection_id, upstream_id). */
  receiptExtras?: Partial<Pick<ReceiptFields, 'result_hash' | 'client_id' | 'connection_id' | 'upstream_id'>>;
}

export interface ValidationServiceDeps {
  policies: PolicyCache;
  sessions: SessionCounters;
  writer: DecisionWriter;
  events: EventBus;
  clock: Clock;
}

const APPROVALS_UNAVAILABLE =
  'human approval is required, but this service version cannot create approvals; denied (fail closed)';

function sessionIdOf(context: Record<string, unknown>): string | null {
  const id = context.session_id;
  if (typeof id === 'string' && id !== '') return id;
  if (typeof id === 'number' && Number.isFinite(id)) return String(id);
  return null;
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
}: ValidationServiceDeps) {
  return {
    async decide(scope: CallScope, call: ToolCall): Promise<Decided> {
      const sessionId = sessionIdOf(call.context);
      const policy = await policies.get(scope.organizationId, call.toolName);
      if (!policy?.isActive) {
        return {
          decision: 'allow',
          reason: policy
            ? `Policy for tool "${call.toolName}" is inactive; allowed without checks`
            : `No policy for tool "${call.toolName}"; allowed without checks`,
          failedConstraints: [],
          failedArgument: null,
          mode: policy?.mode ?? 'deterministic',
          policy,
          session: null,
          sessionId,
        };
      }
      const evaluation = evaluate(policy.compiled, call.arguments);
      let decided = fromEvaluation(evaluation, policy);
      if (decided.decision === 'require_approval') {
        decided = { ...decided, decision: 'deny', reason: `${decided.reason}: ${APPROVALS_UNAVAILABLE}` };
      }
      const sc = policy.definition.sessionConstraints;
      const hasSessionLimits = !!sc && (sc.maxCalls !== undefined || (sc.cumulativeLimits?.length ?? 0) > 0);
      if (decided.decision !== 'allow' || !hasSessionLimits) return { ...decided, session: null, sessionId };
      if (!sessionId) {
        const missing: FailedConstraint = {
          parameter: 'context.session_id',
          constraint_type: 'required',
          expected: 'a session id in context.session_id',
          actual: null,
          message: 'this policy has session limits; context.session_id is required',
        };
        return {
          ...fromEvaluation(mergeEvaluation(evaluation, [missing]), policy),
          session: null,
          sessionId,
        };
      }
      const reservation = await sessions.reserve(
        scope.organizationId,
        sessionId,
        call.toolName,
        sc!,
        call.arguments,
      );
      if (reservation.failures.length > 0) {
        return {
          ...fromEvaluation(mergeEvaluation(evaluation, reservation.failures), policy),
          session: null,
          sessionId,
        };
      }
      return { ...decided, session: reservation, sessionId };
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
      const context = options.source === 'client' ? { ...call.context, source: 'client' } : call.context;
      const session = decided.session;
      try {
        const receipt = await writer.write({
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
        return { decisionId, receipt: receiptSummary(receipt) };
      } catch (err) {
        // Not recorded means not decided: the counted call is given back.
        session?.release();
        throw err;
      }
    },
  };
}

export type ValidationService = ReturnType<typeof createValidationService>;
