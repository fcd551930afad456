import type { Evaluation, FailedConstraint } from '@svc/policy-engine';
import type { Receipt, ReceiptSummary } from '../ledger/model.js';
import type { KeyPrincipal } from '../modules/api-keys/authenticator.js';
import type { JudgeBinding } from '../modules/llm-judge/model.js';
import type { LoadedPolicy } from '../modules/policies/cache.js';

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
  /** That key's lineage: no key of it may resolve an approval the call opens. */
  keyLineageId?: string | null;
  /** The person who created that key (null: unknown): under dual control they may not approve. */
  keyCreator?: string | null;
}

/** The scope of a call made with an API key: its organization, project, tier and the key itself. */
export function callScopeOf(key: KeyPrincipal): CallScope {
  return {
    organizationId: key.organizationId,
    projectId: key.projectId,
    tier: key.tier,
    keyId: key.keyId,
    keyLineageId: key.lineageId,
    keyCreator: key.createdBy ?? null,
  };
}

/** What the pipeline has decided so far about one call; each step may leave a different one. */
export interface Verdict {
  decision: DecisionValue;
  reason: string;
  failedConstraints: readonly FailedConstraint[];
  failedArgument: string | null;
  mode: 'deterministic' | 'llm';
  /**
   * The policy's own evaluation, or a neutral one where it no longer counts (no active policy, a
   * call allowed under an approval): what a later step's failures are merged into.
   */
  evaluation: Evaluation;
  /** The approval the decision binds in its receipt: the one it opens, or the one it used. */
  approvalId: string | null;
  /** llm mode: the policy exception the judge found to apply. */
  matchedException?: string | null;
  /** llm mode: the provider, model and exchange hashes the receipt binds. */
  judge?: Partial<JudgeBinding> | null;
}

/** What a step took for a call, made final once the decision is durable or given back if not. */
export interface Hold {
  /** The decision is committed (its id given): make what was taken final. */
  commit(decisionId: string): void | Promise<void>;
  /**
   * The decision was not recorded, or a later step turned the verdict against what this hold was
   * taken for. `ran`: the tool already ran, so only what it did not spend is given back.
   */
  release(ran: boolean): void | Promise<void>;
}

/** Everything a step may read about the call it checks. */
export interface StepInput {
  scope: CallScope;
  call: ToolCall;
  /** The active policy of the tool, or null when there is none (or it is inactive). */
  policy: LoadedPolicy | null;
  /** context.session_id as a string, or null. */
  sessionId: string | null;
}

export interface StepResult {
  verdict: Verdict;
  hold?: Hold;
  /** Absolute session counters after this call, written in the same transaction as the decision. */
  session?: SessionWrite;
}

/**
 * One check of the pipeline (constraints, approvals, session limits; later the LLM judge and
 * budgets). It sees the verdict so far and returns the verdict it leaves, with what it holds.
 */
export interface Step {
  readonly name: string;
  run(input: StepInput, verdict: Verdict): Promise<StepResult> | StepResult;
}

export interface SessionWrite {
  sessionId: string;
  calls: number;
  cumulative: Record<string, number>;
}

/** What the tool run by the pipeline (MCP: the upstream call) reports back for the record. */
export interface Execution<T> {
  value: T;
  /** sha256:<hex> of the tool's result, bound into the receipt. */
  resultHash?: string;
  /** Appended to the recorded reason after `; ` (for example why the tool failed). */
  note?: string;
  /**
   * false: the tool was not run after all (MCP: the client cancelled the call before it was sent).
   * The decision is recorded as taken, and what the checks held for it is given back: it counts
   * toward no session limit and uses no approval.
   */
  ran?: false;
}

export interface EnforceRequest<T = never> {
  scope: CallScope;
  call: ToolCall;
  /** `client`: a decision an SDK took locally (POST /v1/decisions); its verdict is `reported`. */
  source: 'server' | 'client';
  /** A decision taken outside the pipeline's checks: the steps are skipped and it is recorded as given. */
  reported?: { decision: 'allow' | 'deny'; reason: string };
  /** Milliseconds since the call arrived; read once the decision is taken. */
  elapsed?: () => number;
  /** The latency to record when `elapsed` is not given (client-reported). */
  latencyMs?: number;
  /** Runs the tool for an allowed call, before the decision is recorded, so the receipt binds its result. */
  execute?: () => Promise<Execution<T>>;
  /** Extra receipt bindings (MCP: client_id, connection_id, upstream_id). */
  bindings?: { client_id?: string; connection_id?: string; upstream_id?: string };
  /**
   * The id to record the decision under, derived by a caller that must find it again (the decision
   * log's Idempotency-Key); a new UUIDv7 otherwise.
   */
  decisionId?: string;
}

/** One decision an SDK took locally, for recordReported. */
export interface ReportedCall {
  call: ToolCall;
  reported: NonNullable<EnforceRequest['reported']>;
  latencyMs: number;
  /**
   * The id to record the decision under, derived by a caller that must find it again (the decision
   * log's Idempotency-Key); a new UUIDv7 otherwise.
   */
  decisionId?: string;
}

export interface Enforced<T = never> {
  decision: DecisionValue;
  reason: string;
  failedConstraints: readonly FailedConstraint[];
  mode: 'deterministic' | 'llm';
  policyVersion: number | null;
  latencyMs: number;
  decisionId: string;
  receipt: ReceiptSummary;
  /** The whole receipt as committed (POST /v1/validate returns it). */
  fullReceipt: Receipt;
  /** The approval opened for a `require_approval` decision, else null. */
  approvalId: string | null;
  /** Whether the tool ran (only for an allowed call with `execute`). */
  ran: boolean;
  /** What `execute` returned, when it ran. */
  execution?: Execution<T>;
}
