import type { Receipt } from '../src/ledger/model.js';
import { appendReceipts, emptyChainHead } from '../src/ledger/receipt.js';
import type { TestApp } from './helpers.js';

/**
 * What whoever controls the database could do: change one receipt and recompute the whole chain
 * (every receipt hash, link and Merkle root, and the chain head) so that it is consistent in itself.
 */
export async function rewriteChain(
  t: Pick<TestApp, 'store'>,
  organizationId: string,
  sequence: number,
  reason: string,
) {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', organizationId)
    .orderBy('sequence')
    .execute();
  const inputs = rows.map((row) => {
    const r = JSON.parse(row.payload) as Receipt;
    const {
      schema: _s,
      sequence: q,
      previous_receipt_hash: _p,
      merkle_root: _m,
      receipt_hash: _h,
      ...fields
    } = r;
    return q === sequence ? { ...fields, reason } : fields;
  });
  const { receipts, head } = appendReceipts(emptyChainHead(), inputs);
  for (const f of receipts) {
    await t.store.db
      .updateTable('receipts')
      .set({ payload: JSON.stringify(f), receipt_hash: f.receipt_hash })
      .where('organization_id', '=', organizationId)
      .where('sequence', '=', f.sequence)
      .execute();
  }
  await t.store.db
    .updateTable('chain_heads')
    .set({ last_hash: head.lastHash, frontier: JSON.stringify(head.frontier) })
    .where('organization_id', '=', organizationId)
    .execute();
}
