import type { Db } from '../storage/db.js';

/**
 * The receipt already chained for a decision or ledger entry, if any: what a writer that takes over
 * from one that died must look for before chaining another. No index serves it (`receipts_decision`
 * was dropped), so it is for that rare repair only, never a request's path.
 */
export async function chainedReceiptFor(db: Db, organizationId: string, decisionId: string) {
  const row = await db
    .selectFrom('receipts')
    .select('receipt_id')
    .where('organization_id', '=', organizationId)
    .where('decision_id', '=', decisionId)
    .executeTakeFirst();
  return row?.receipt_id;
}
