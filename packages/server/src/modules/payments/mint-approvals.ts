import type { OrgScope } from '../../lib/scope.js';
import type { Db } from '../../storage/db.js';
import { statusAt } from '../approvals/model.js';
import type { ApprovalRow } from '../approvals/repository.js';

/** Tool name of the approvals a mint opens. */
export const CAPSULE_APPROVAL_TOOL = 'gateway.capsule';

type Requester = Pick<OrgScope, 'organizationId' | 'projectId' | 'principal'>;

/**
 * Until when an approved mint approval may be used: its TTL (from its opening to its `expires_at`)
 * counted again from when it was approved (`resolved_at`, the deciding approval under dual control).
 * A person approves a payment for now, not for whenever its agent comes back. Null for an approval
 * that is not approved.
 */
export function approvedUseBy(row: ApprovalRow): string | null {
  if (row.status !== 'approved' || row.resolved_at === null) return null;
  const ttl = Date.parse(row.expires_at) - Date.parse(row.created_at);
  return new Date(Date.parse(row.resolved_at) + ttl).toISOString();
}

/** Whether an approved mint approval is past its use-by at `now`. */
export const pastUseBy = (row: ApprovalRow, now: string): boolean => {
  const useBy = approvedUseBy(row);
  return useBy !== null && useBy <= now;
};

/**
 * The approval a mint without `approval_ref` names instead of opening another one: the requester's
 * own (the same API key, or the same person), in the organization and project, for the same payload
 * (`argument_hash`) and at least as many approvers, still pending, or approved and still usable.
 * Approved ones come first, then the oldest. Run under the organization's spend-ledger lock with its
 * transaction's `db`, so two mints of one payload (on any number of instances) open one approval.
 */
export async function reusableApproval(
  db: Db,
  scope: Requester,
  argumentHash: string,
  required: number,
  now: string,
): Promise<ApprovalRow | undefined> {
  const p = scope.principal;
  let q = db
    .selectFrom('approvals')
    .selectAll()
    .where('organization_id', '=', scope.organizationId)
    .where('status', 'in', ['pending', 'approved'])
    .where('tool_name', '=', CAPSULE_APPROVAL_TOOL)
    .where('argument_hash', '=', argumentHash)
    .where('used_at', 'is', null)
    .where('required_approvals', '>=', required);
  q =
    p.kind === 'apiKey'
      ? q.where('requested_by_key_id', '=', p.keyId)
      : q.where('requested_by_key_id', 'is', null).where('requested_by', '=', p.userId);
  q =
    scope.projectId === null
      ? q.where('project_id', 'is', null)
      : q.where('project_id', '=', scope.projectId);
  const rows = await q.orderBy('created_at').orderBy('id').execute();
  const live = rows.filter((r) => {
    const status = statusAt(r, now);
    return status === 'pending' || (status === 'approved' && !pastUseBy(r, now));
  });
  return live.find((r) => r.status === 'approved') ?? live[0];
}
