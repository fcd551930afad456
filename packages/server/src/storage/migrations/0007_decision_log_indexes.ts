import type { Kysely } from 'kysely';

/**
 * No query reads receipts by decision_id (a decision's receipt is found through its receipt_id),
 * so this index only cost every decision one more B-tree write.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('receipts_decision').ifExists().execute();
}
