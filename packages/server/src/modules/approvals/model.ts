import { hashJson } from '../../ledger/canonical.js';
import { argumentHash } from '../../ledger/receipt.js';
import { uuidv7 } from '../../lib/ids.js';
import type { Principal } from '../../plugins/auth.js';
import type { ApprovalRow } from './repository.js';

export type ApprovalStatus = 'pending' | 'approved' | 'denied' | 'expired';
export type ApprovalAction = 'approve' | 'deny';

export const DEFAULT_APPROVAL_TTL_SECONDS = 3600;

export { APPROVALS_NEED_TEAM, approvalsAllowed } from '@svc/policy-engine';

/** Expiry is computed on read: a pending approval past expiresAt is expired before the sweeper marks it. */
export function statusAt(row: ApprovalRow, now: string): ApprovalStatus {
  if (row.status === 'pending' && row.expires_at <= now) return 'expired';
  return row.status as ApprovalStatus;
}

/**
 * approval_hash of a resolution receipt: sha256 of the RFC 8785 canonical JSON of
 * `{"action": "approve"|"deny", "approval_id": <id>, "resolved_by": <resolvedBy>}`.
 */
export function approvalHash(approvalId: string, action: ApprovalAction, resolvedBy: string): string {
  return hashJson({ approval_id: approvalId, action, resolved_by: resolvedBy });
}

/** One person's approval of an approval that needs several (dual control), as stored. */
export interface ApprovalStep {
  resolvedBy: string;
  resolvedAt: string;
  /** The API key that relayed this person's approval; null when they used their own token. */
  byKeyId: string | null;
  /** That key's lineage (absent on steps stored before lineages): it relays one approval at most. */
  byLineageId?: string | null;
  /**
   * The person who created that key (api_keys.created_by), who gave this step as much as the person
   * named: absent on steps stored before creators were recorded (migration 0030), looked up then.
   */
  byKeyCreator?: string | null;
}

/** The approvals given so far; a row approved before approvers were kept shows its one resolver. */
export function stepsOf(row: ApprovalRow): ApprovalStep[] {
  const steps = JSON.parse(row.approvers ?? '[]') as ApprovalStep[];
  if (steps.length === 0 && row.status === 'approved' && row.resolved_by && row.resolved_at) {
    return [{ resolvedBy: row.resolved_by, resolvedAt: row.resolved_at, byKeyId: row.resolved_by_key_id }];
  }
  return steps;
}

/** What the API shows of the approvals given so far: who and when, in order. */
export const approversOf = (row: ApprovalRow) =>
  stepsOf(row).map((s) => ({ resolvedBy: s.resolvedBy, resolvedAt: s.resolvedAt }));

/** An approval as GET shows it: the fields the spec lists for its state (§4 Approvals). */
export interface Approval {
  id: string;
  status: ApprovalStatus;
  toolName: string;
  decisionId: string | null;
  createdAt: string;
  arguments?: Record<string, unknown>;
  expiresAt?: string;
  resolvedBy?: string;
  resolvedAt?: string;
  /** The API key that relayed the resolution; null when a user resolved it. */
  resolvedByKeyId?: string | null;
  /** Distinct people who must approve (2 under dual control); approvers holds those who did. */
  requiredApprovals: number;
  approvers: { resolvedBy: string; resolvedAt: string }[];
}

/** A page of resolved approvals: the rows and where they stand in the whole list. */
export interface ResolvedPage {
  data: Approval[];
  pagination: { total: number; limit: number; offset: number; hasMore: boolean };
}

export function toApproval(row: ApprovalRow, now: string): Approval {
  const status = statusAt(row, now);
  const base = {
    id: row.id,
    status,
    toolName: row.tool_name,
    decisionId: row.decision_id,
    createdAt: row.created_at,
    requiredApprovals: Number(row.required_approvals ?? 1),
    approvers: approversOf(row),
  };
  switch (status) {
    case 'pending':
      return { ...base, arguments: JSON.parse(row.arguments), expiresAt: row.expires_at };
    case 'expired':
      return { ...base, expiresAt: row.expires_at };
    default:
      return {
        ...base,
        resolvedBy: row.resolved_by ?? '',
        resolvedAt: row.resolved_at ?? '',
        resolvedByKeyId: row.resolved_by_key_id,
      };
  }
}

/** Why an approval was asked for: the policy and the constraint that escalated the call. */
export interface Escalation {
  /** What asked: a tool's policy, the spend budgets (economic) or a payment policy pack (gateway). */
  source: 'policy' | 'economic' | 'gateway';
  /** The policy, in words (e.g. "policy of tool wire, version 3"). */
  policy: string;
  /** The constraint that asked for a person, in words. */
  constraint: string;
  /** The policy's version when it is versioned (tool policies, policy packs). */
  policyVersion?: number;
  /** The failed constraints as the decision recorded them (tool policies). */
  constraints?: { parameter: string; constraint_type: string; message: string }[];
}

export interface PendingApproval {
  id: string;
  toolName: string;
  arguments: Record<string, unknown>;
  status: 'pending';
  expiresAt: string;
  createdAt: string;
  /** From the escalated call's context, when it named them (an approval opened by hand has none). */
  agentId?: string;
  sessionId?: string;
  escalation?: Escalation;
  requiredApprovals: number;
  approvers: { resolvedBy: string; resolvedAt: string }[];
}

/** agent_id and session_id of a recorded decision's context, when they are strings. */
function callContext(json: string | null | undefined): Pick<PendingApproval, 'agentId' | 'sessionId'> {
  if (!json) return {};
  const ctx = JSON.parse(json) as Record<string, unknown> | null;
  return {
    ...(typeof ctx?.agent_id === 'string' ? { agentId: ctx.agent_id } : {}),
    ...(typeof ctx?.session_id === 'string' ? { sessionId: ctx.session_id } : {}),
  };
}

/** The escalating decision as listPending joins it (absent for approvals not opened by a validation). */
export interface DecisionJoin {
  /** The linked decision's verdict: only a require_approval one asked for a person. */
  decision_verdict?: string | null;
  decision_context?: string | null;
  decision_validations?: string | null;
  decision_reason?: string | null;
  decision_policy_version?: number | null;
}

/**
 * The escalation an approval recorded when it was opened; for an approval linked to a
 * require_approval decision, what that decision recorded: the policy version and the constraints
 * that failed (on such a decision every failed constraint is one that asks for a person). An
 * approval opened by hand on a decision that allowed or denied the call was asked for by whoever
 * opened it, not by the policy: it has none.
 */
function escalationOf(row: ApprovalRow & DecisionJoin): Escalation | undefined {
  if (row.escalation) return JSON.parse(row.escalation) as Escalation;
  if (row.decision_verdict !== 'require_approval') return undefined;
  if (row.decision_reason === undefined || row.decision_reason === null) return undefined;
  const failed = row.decision_validations
    ? (JSON.parse(row.decision_validations) as {
        parameter: string;
        constraint_type: string;
        message: string;
      }[])
    : [];
  const version = row.decision_policy_version ?? undefined;
  return {
    source: 'policy',
    policy: `policy of tool ${row.tool_name}${version !== undefined ? `, version ${version}` : ''}`,
    constraint: failed.length > 0 ? failed.map((f) => f.message).join('; ') : row.decision_reason,
    ...(version !== undefined ? { policyVersion: version } : {}),
    constraints: failed.map((f) => ({
      parameter: f.parameter,
      constraint_type: f.constraint_type,
      message: f.message,
    })),
  };
}

/** agentId and sessionId of the action an economic or capsule approval is bound to. */
function boundContext(source: Escalation['source'] | undefined, args: Record<string, unknown>) {
  const pick = (agent: unknown, session: unknown): Pick<PendingApproval, 'agentId' | 'sessionId'> => ({
    ...(typeof agent === 'string' ? { agentId: agent } : {}),
    ...(typeof session === 'string' ? { sessionId: session } : {}),
  });
  if (source === 'economic') return pick(args.agentId, args.sessionId);
  if (source === 'gateway') return pick(args.agent_id, undefined);
  return {};
}

export function toPending(row: ApprovalRow & DecisionJoin): PendingApproval {
  const escalation = escalationOf(row);
  const args = JSON.parse(row.arguments) as Record<string, unknown>;
  return {
    id: row.id,
    toolName: row.tool_name,
    arguments: args,
    status: 'pending',
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    requiredApprovals: Number(row.required_approvals ?? 1),
    approvers: approversOf(row),
    ...(row.decision_context ? callContext(row.decision_context) : boundContext(escalation?.source, args)),
    ...(escalation ? { escalation } : {}),
  };
}

/** What opening an approval needs; `id` is preassigned when a receipt must bind it first. */
export interface NewApproval {
  id?: string;
  decisionId: string | null;
  toolName: string;
  arguments: Record<string, unknown>;
  expiresInSeconds?: number;
  /** The API key whose call or request opens it; that key may not resolve it. */
  requestedByKeyId?: string | null;
  /** That key's lineage: no key of it may resolve it. */
  requestedByLineageId?: string | null;
  /** That key's creator (null: unknown). Under dual control they may not approve it. */
  requestedByKeyCreator?: string | null;
  /** Why it is asked for, when its opener is not a recorded validation (which the decision explains). */
  escalation?: Escalation;
  /** The person whose request opens it; under dual control they may not approve it. */
  requestedBy?: string | null;
  /** Distinct people who must approve it: 1 (default) or 2 (dual control). */
  requiredApprovals?: number;
}

/** Who asks for a new approval, from the credential asking: a key (its lineage, its creator) or a person. */
export function requesterOf(
  principal: Principal,
): Pick<NewApproval, 'requestedByKeyId' | 'requestedByLineageId' | 'requestedByKeyCreator' | 'requestedBy'> {
  return principal.kind === 'apiKey'
    ? {
        requestedByKeyId: principal.keyId,
        requestedByLineageId: principal.lineageId,
        requestedByKeyCreator: principal.createdBy ?? null,
      }
    : { requestedBy: principal.kind === 'user' ? principal.userId : null };
}

/** The requesting key's lineage: a caller naming the key must name its lineage, or the check is void. */
function lineageOf(input: NewApproval): string | null {
  const key = input.requestedByKeyId ?? null;
  if (key === null) return null;
  if (!input.requestedByLineageId) {
    throw new Error(`approval opened by API key ${key} without its lineage: no key of it could be refused`);
  }
  return input.requestedByLineageId;
}

/** The row of a new pending approval, created at `created`. */
export function pendingApprovalRow(
  scope: { organizationId: string; projectId: string | null },
  input: NewApproval,
  created: Date,
): ApprovalRow {
  const ttl = input.expiresInSeconds ?? DEFAULT_APPROVAL_TTL_SECONDS;
  return {
    id: input.id ?? uuidv7(),
    organization_id: scope.organizationId,
    project_id: scope.projectId,
    decision_id: input.decisionId,
    tool_name: input.toolName,
    arguments: JSON.stringify(input.arguments),
    argument_hash: argumentHash(input.arguments),
    status: 'pending',
    expires_at: new Date(created.getTime() + ttl * 1000).toISOString(),
    resolved_by: null,
    resolved_at: null,
    used_at: null,
    created_at: created.toISOString(),
    requested_by_key_id: input.requestedByKeyId ?? null,
    requested_by_lineage_id: lineageOf(input),
    resolved_by_key_id: null,
    escalation: input.escalation ? JSON.stringify(input.escalation) : null,
    required_approvals: input.requiredApprovals ?? 1,
    approvers: '[]',
    requested_by: input.requestedBy ?? null,
    requested_by_key_creator: input.requestedByKeyId ? (input.requestedByKeyCreator ?? null) : null,
  };
}
