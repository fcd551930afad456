import { hashJson } from '../../ledger/canonical.js';
import { argumentHash } from '../../ledger/receipt.js';
import { uuidv7 } from '../../lib/ids.js';
import type { ApprovalRow } from './repository.js';

export type ApprovalStatus = 'pending' | 'approved' | 'denied' | 'expired';
export type ApprovalAction = 'approve' | 'deny';

export const DEFAULT_APPROVAL_TTL_SECONDS = 3600;

/** SPEC §8: human-in-the-loop approvals need the Team plan or above. */
export const APPROVALS_NEED_TEAM = 'human-in-the-loop approvals need the Team plan or above';

export function approvalsAllowed(tier: string): boolean {
  return tier !== 'free';
}

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
}

export function toApproval(row: ApprovalRow, now: string): Approval {
  const status = statusAt(row, now);
  const base = {
    id: row.id,
    status,
    toolName: row.tool_name,
    decisionId: row.decision_id,
    createdAt: row.created_at,
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

export function toPending(row: ApprovalRow & { decision_context?: string | null }): PendingApproval {
  return {
    id: row.id,
    toolName: row.tool_name,
    arguments: JSON.parse(row.arguments),
    status: 'pending',
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    ...callContext(row.decision_context),
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
    resolved_by_key_id: null,
  };
}
