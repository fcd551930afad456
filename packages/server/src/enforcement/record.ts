import type { ReceiptFields, WriteItem } from '../ledger/model.js';
import { argumentHash } from '../ledger/receipt.js';
import type { LoadedPolicy } from '../modules/policies/cache.js';
import type { CallScope, EnforceRequest, SessionWrite, ToolCall, Verdict } from './model.js';

function withoutSource(context: Record<string, unknown>): Record<string, unknown> {
  const { source: _source, ...rest } = context;
  return rest;
}

export interface RecordInput {
  decisionId: string;
  now: string;
  scope: CallScope;
  call: ToolCall;
  verdict: Verdict;
  policy: LoadedPolicy | null;
  source: EnforceRequest['source'];
  latencyMs: number;
  session: SessionWrite | undefined;
  bindings: EnforceRequest['bindings'];
  resultHash: string | undefined;
}

/** The judge's binding as receipt fields; absent parts are left out. */
function judgeFields(j: Verdict['judge']): Partial<ReceiptFields> {
  if (!j) return {};
  return {
    ...(j.provider ? { judge_provider: j.provider } : {}),
    ...(j.model ? { judge_model: j.model } : {}),
    ...(j.promptHash ? { judge_prompt_hash: j.promptHash } : {}),
    ...(j.answerHash ? { judge_answer_hash: j.answerHash } : {}),
  };
}

/** The durable write of one decision: its receipt fields, its row and its session counters. */
export function writeItemOf(r: RecordInput): WriteItem {
  const { scope, call, verdict } = r;
  // context.source says `client` only for client-reported decisions; a caller cannot claim it.
  const context =
    r.source === 'client'
      ? { ...call.context, source: 'client' }
      : call.context.source === 'client'
        ? withoutSource(call.context)
        : call.context;
  return {
    receipt: {
      organization_id: scope.organizationId,
      project_id: scope.projectId,
      decision_id: r.decisionId,
      decision: verdict.decision,
      mode: verdict.mode,
      tool_name: call.toolName,
      argument_hash: argumentHash(call.arguments),
      policy_version: r.policy?.version ?? null,
      policy_hash: r.policy?.hash ?? null,
      reason: verdict.reason,
      timestamp: r.now,
      ...(r.source === 'client' ? { source: 'client' } : {}),
      ...(verdict.approvalId ? { approval_id: verdict.approvalId } : {}),
      ...r.bindings,
      ...(r.resultHash ? { result_hash: r.resultHash } : {}),
      ...judgeFields(verdict.judge),
    },
    decision: {
      id: r.decisionId,
      organization_id: scope.organizationId,
      project_id: scope.projectId,
      tool_name: call.toolName,
      arguments: JSON.stringify(call.arguments),
      context: JSON.stringify(context),
      decision: verdict.decision,
      mode: verdict.mode,
      reason: verdict.reason,
      failed_argument: verdict.failedArgument,
      matched_exception: verdict.matchedException ?? null,
      validations: verdict.failedConstraints.length > 0 ? JSON.stringify(verdict.failedConstraints) : null,
      latency_ms: r.latencyMs,
      source: r.source,
      policy_version: r.policy?.version ?? null,
      created_at: r.now,
    },
    ...(r.session
      ? {
          session: {
            organization_id: scope.organizationId,
            session_id: r.session.sessionId,
            tool_name: call.toolName,
            calls: r.session.calls,
            cumulative: JSON.stringify(r.session.cumulative),
            updated_at: r.now,
          },
        }
      : {}),
  };
}

/**
 * A write item built before the tool ran (decision id, `now` and `resultHash` left out), completed
 * with them once it ran: the same item writeItemOf builds from the same record.
 */
export function withOutcome(
  item: WriteItem,
  decisionId: string,
  now: string,
  resultHash: string | undefined,
): WriteItem {
  // Copied, then the copies' fields set: a spread followed by more properties in one literal made
  // V8 create a new hidden class per call on the pipeline's path (docs/benchmarks.md).
  const { result_hash: _r, ...rest } = item.receipt;
  const receipt: ReceiptFields = rest;
  receipt.decision_id = decisionId;
  receipt.timestamp = now;
  if (resultHash) receipt.result_hash = resultHash;
  const decision = { ...item.decision } as NonNullable<WriteItem['decision']>;
  decision.id = decisionId;
  decision.created_at = now;
  const out: WriteItem = { receipt, decision };
  if (item.session) {
    const session = { ...item.session };
    session.updated_at = now;
    out.session = session;
  }
  return out;
}
