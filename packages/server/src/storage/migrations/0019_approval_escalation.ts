import type { Kysely } from 'kysely';

/**
 * Why an approval was asked for, as its opener saw it: the policy and the constraint that escalated
 * (JSON, null for approvals opened by hand or before this column).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('approvals').addColumn('escalation', 'text').execute();
}
