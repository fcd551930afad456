import { hashJson } from '../../ledger/canonical.js';
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
}

export function toPending(row: ApprovalRow): PendingApproval {
  return {
    id: row.id,
    toolName: row.tool_name,
    arguments: JSON.parse(row.arguments),
    status: 'pending',
    expiresAt: row.expires_at,
    createdAt: row.created_at,
  };
}
