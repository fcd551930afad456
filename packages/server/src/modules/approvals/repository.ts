import { type Kysely, type Selectable, sql } from 'kysely';
import type { ApprovalsTable, Database } from '../../storage/schema.js';
import type { DecisionJoin } from './model.js';

export type ApprovalRow = Selectable<ApprovalsTable>;

/** What one resolution step writes: the approvers so far and, when it decides, the outcome. */
export type Step = Partial<
  Pick<ApprovalRow, 'status' | 'resolved_by' | 'resolved_at' | 'resolved_by_key_id'>
> & { approvers: string };

/**
 * Approval storage; every method is scoped by organization except expireDue, the sweeper's
 * cross-tenant maintenance write. State changes are conditional UPDATEs, so two concurrent writers
 * can never both win a transition (on PostgreSQL the second one re-checks the WHERE after the
 * first commits and matches nothing).
 */
export function createApprovalRepository(db: Kysely<Database>) {
  return {
    async insert(row: ApprovalRow): Promise<void> {
      await db.insertInto('approvals').values(row).execute();
    },

    /**
     * The creators (api_keys.created_by) of these keys of the organization: for approvals and steps
     * recorded before creators were (migration 0030), or by an instance of an older version. A key
     * not found (deleted) is left out.
     */
    async keyCreators(organizationId: string, keyIds: string[]): Promise<Map<string, string | null>> {
      if (keyIds.length === 0) return new Map();
      const rows = await db
        .selectFrom('api_keys')
        .select(['id', 'created_by'])
        .where('organization_id', '=', organizationId)
        .where('id', 'in', keyIds)
        .execute();
      return new Map(rows.map((r) => [r.id, r.created_by]));
    },

    async get(organizationId: string, id: string): Promise<ApprovalRow | undefined> {
      return db
        .selectFrom('approvals')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** Pending and not expired at `now`, oldest first, with the context of the call that escalated (if any). */
    async listPending(organizationId: string, now: string): Promise<(ApprovalRow & DecisionJoin)[]> {
      return db
        .selectFrom('approvals')
        .leftJoin('decisions', (j) =>
          j
            .onRef('decisions.id', '=', 'approvals.decision_id')
            .onRef('decisions.organization_id', '=', 'approvals.organization_id'),
        )
        .selectAll('approvals')
        .select([
          'decisions.decision as decision_verdict',
          'decisions.context as decision_context',
          'decisions.validations as decision_validations',
          'decisions.reason as decision_reason',
          'decisions.policy_version as decision_policy_version',
        ])
        .where('approvals.organization_id', '=', organizationId)
        .where('approvals.status', '=', 'pending')
        .where('approvals.expires_at', '>', now)
        .orderBy('approvals.created_at')
        .orderBy('approvals.id')
        .execute();
    },

    /**
     * One page of the approved and denied approvals, most recently resolved first (equal times by
     * id, newest first, so that pages neither repeat nor skip a row), and how many there are.
     */
    async listResolved(
      organizationId: string,
      limit: number,
      offset: number,
    ): Promise<{ rows: ApprovalRow[]; total: number }> {
      const resolved = db
        .selectFrom('approvals')
        .where('organization_id', '=', organizationId)
        // Word for word the condition of the partial index approvals_resolved (migration 0027).
        .where(sql<boolean>`status in ('approved', 'denied')`);
      const [rows, count] = await Promise.all([
        resolved
          .selectAll()
          .orderBy('resolved_at', 'desc')
          .orderBy('id', 'desc')
          .limit(limit)
          .offset(offset)
          .execute(),
        resolved.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow(),
      ]);
      return { rows, total: Number(count.n) };
    },

    /**
     * One resolution step, compare-and-set: applies `set` only if the approval is still pending,
     * unexpired at `now` and its approvers are still `seenApprovers` (what the caller decided on), so
     * of two concurrent steps one wins and the other re-reads. The updated row or undefined.
     */
    async advance(
      organizationId: string,
      id: string,
      seenApprovers: string,
      set: Step,
      now: string,
    ): Promise<ApprovalRow | undefined> {
      return db
        .updateTable('approvals')
        .set(set)
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .where('expires_at', '>', now)
        .where('approvers', '=', seenApprovers)
        .returningAll()
        .executeTakeFirst();
    },

    /** Marks an approved approval used, once, and only for the call it was granted for. */
    async use(
      organizationId: string,
      id: string,
      match: { toolName: string; argumentHash: string },
      now: string,
    ): Promise<boolean> {
      const res = await db
        .updateTable('approvals')
        .set({ used_at: now })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('status', '=', 'approved')
        .where('used_at', 'is', null)
        .where('tool_name', '=', match.toolName)
        .where('argument_hash', '=', match.argumentHash)
        .executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    /** Gives a use back (the call it allowed was not recorded); only the use stamped `usedAt`. */
    async unuse(organizationId: string, id: string, usedAt: string): Promise<void> {
      await db
        .updateTable('approvals')
        .set({ used_at: null })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('used_at', '=', usedAt)
        .execute();
    },

    /** Flips every pending approval past its expiry to expired; returns the rows this call flipped. */
    async expireDue(now: string, limit: number): Promise<ApprovalRow[]> {
      const due = db
        .selectFrom('approvals')
        .select('id')
        .where('status', '=', 'pending')
        .where('expires_at', '<=', now)
        .orderBy('expires_at')
        .limit(limit);
      return db
        .updateTable('approvals')
        .set({ status: 'expired' })
        .where('id', 'in', due)
        .where('status', '=', 'pending')
        .returningAll()
        .execute();
    },

    /** Tool name and arguments of a decision of the organization, to link an approval to it. */
    async decisionCall(
      organizationId: string,
      decisionId: string,
    ): Promise<{ toolName: string; arguments: Record<string, unknown> } | undefined> {
      const row = await db
        .selectFrom('decisions')
        .select(['tool_name', 'arguments'])
        .where('organization_id', '=', organizationId)
        .where('id', '=', decisionId)
        .executeTakeFirst();
      return row && { toolName: row.tool_name, arguments: JSON.parse(row.arguments) };
    },
  };
}

export type ApprovalRepository = ReturnType<typeof createApprovalRepository>;
