import type { FailedConstraint } from '@svc/policy-engine';
import type { CallScope } from '../../enforcement/model.js';
import type { Enforcement } from '../../enforcement/pipeline.js';
import type { ReceiptSummary } from '../../ledger/model.js';
import type { Clock } from '../../lib/clock.js';
import { notFound } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import type { ReceiptRepository } from '../receipts/repository.js';
import type { DecisionFilter, DecisionRepository, DecisionRow } from './repository.js';

export interface Decision {
  id: string;
  projectId: string | null;
  toolName: string;
  arguments: Record<string, unknown>;
  context: Record<string, unknown>;
  decision: string;
  mode: string;
  reason: string;
  failedArgument: string | null;
  matchedException: string | null;
  validations: FailedConstraint[] | null;
  latencyMs: number;
  policyVersion: number | null;
  receipt: ReceiptSummary;
  createdAt: string;
}

export interface DayStats {
  allowed: number;
  denied: number;
  escalated: number;
  deterministic: number;
  llm: number;
}

export interface Stats {
  period: { days: number };
  summary: DayStats & { total: number };
  breakdown: (DayStats & { date: string })[];
}

/** A decision an SDK took locally from a cached deterministic policy (POST /v1/decisions). */
export interface ClientDecision {
  toolName: string;
  arguments: Record<string, unknown>;
  context: Record<string, unknown>;
  decision: 'allow' | 'deny';
  reason: string | undefined;
  latencyMs: number;
  /** The id to record it under (derived from the request's Idempotency-Key claim); a new one otherwise. */
  decisionId?: string;
}

export interface DecisionServiceDeps {
  decisions: DecisionRepository;
  receipts: ReceiptRepository;
  enforcement: Pick<Enforcement, 'enforce' | 'recordReported'>;
  clock: Clock;
}

const DAY_MS = 86_400_000;

export function toDecision(row: DecisionRow): Decision {
  return {
    id: row.id,
    projectId: row.project_id,
    toolName: row.tool_name,
    arguments: JSON.parse(row.arguments),
    context: JSON.parse(row.context),
    decision: row.decision,
    mode: row.mode,
    reason: row.reason,
    failedArgument: row.failed_argument,
    matchedException: row.matched_exception,
    validations: row.validations === null ? null : JSON.parse(row.validations),
    latencyMs: Number(row.latency_ms),
    policyVersion: row.policy_version === null ? null : Number(row.policy_version),
    receipt: {
      receipt_id: row.receipt_id,
      receipt_hash: row.receipt_hash,
      previous_receipt_hash: row.previous_receipt_hash,
      merkle_root: row.merkle_root,
    },
    createdAt: row.created_at,
  };
}

const zero = (): DayStats => ({ allowed: 0, denied: 0, escalated: 0, deterministic: 0, llm: 0 });

function tally(into: DayStats, decision: string, mode: string, n: number): void {
  if (decision === 'allow') into.allowed += n;
  else if (decision === 'deny') into.denied += n;
  else if (decision === 'require_approval') into.escalated += n;
  if (mode === 'deterministic') into.deterministic += n;
  else if (mode === 'llm') into.llm += n;
}

export function createDecisionService({ decisions, receipts, enforcement, clock }: DecisionServiceDeps) {
  return {
    async list(scope: OrgScope, filter: DecisionFilter, limit: number, offset: number) {
      const { rows, total } = await decisions.list(scope.organizationId, filter, limit, offset);
      return {
        data: rows.map(toDecision),
        pagination: { total, limit, offset, hasMore: offset + rows.length < total },
      };
    },

    /** Per-UTC-day counts over the last `days` days, today included, zero days included. */
    async stats(scope: OrgScope, days: number, projectId: string | undefined): Promise<Stats> {
      const now = clock.now().getTime();
      const first = now - (now % DAY_MS) - (days - 1) * DAY_MS;
      const breakdown = Array.from({ length: days }, (_, i) => ({
        date: new Date(first + i * DAY_MS).toISOString().slice(0, 10),
        ...zero(),
      }));
      const byDate = new Map(breakdown.map((b) => [b.date, b]));
      const summary = { total: 0, ...zero() };
      const counts = await decisions.countByDay(scope.organizationId, {
        ...(projectId !== undefined ? { projectId } : {}),
        from: new Date(first).toISOString(),
        before: new Date(first + days * DAY_MS).toISOString(),
      });
      for (const c of counts) {
        const day = byDate.get(c.day);
        if (!day) continue;
        tally(day, c.decision, c.mode, c.n);
        tally(summary, c.decision, c.mode, c.n);
        summary.total += c.n;
      }
      return { period: { days }, summary, breakdown };
    },

    async get(scope: OrgScope, id: string): Promise<Decision> {
      const row = await decisions.get(scope.organizationId, id);
      if (!row) throw notFound('Decision');
      return toDecision(row);
    },

    /** The stored receipt JSON, byte for byte as written. */
    async receipt(scope: OrgScope, id: string): Promise<string> {
      const payload = await receipts.payloadOfDecision(scope.organizationId, id);
      if (payload === undefined) throw notFound('Decision');
      return payload;
    },

    /**
     * Records a client-side decision through the same pipeline as server validations (its checks
     * skipped: the SDK took the decision), so it is chained into the organization's receipts. The
     * current policy (if any) is bound into the receipt: the SDK evaluated a cached copy of it.
     */
    async log(scope: CallScope, input: ClientDecision): Promise<{ id: string }> {
      const done = await enforcement.enforce({
        scope,
        call: { toolName: input.toolName, arguments: input.arguments, context: input.context },
        source: 'client',
        reported: {
          decision: input.decision,
          reason: input.reason ?? defaultReason(input.decision),
        },
        latencyMs: input.latencyMs,
        decisionId: input.decisionId,
      });
      return { id: done.decisionId };
    },

    /** Records client decisions in one transaction, all or none; ids in input order. */
    async logMany(scope: CallScope, inputs: readonly ClientDecision[]): Promise<string[]> {
      return enforcement.recordReported(
        scope,
        inputs.map((input) => ({
          call: { toolName: input.toolName, arguments: input.arguments, context: input.context },
          reported: { decision: input.decision, reason: input.reason ?? defaultReason(input.decision) },
          latencyMs: input.latencyMs,
          decisionId: input.decisionId,
        })),
      );
    },
  };
}

export type DecisionService = ReturnType<typeof createDecisionService>;

const defaultReason = (decision: 'allow' | 'deny') =>
  decision === 'allow' ? 'Allowed by the client' : 'Denied by the client';
