import type { Transaction } from 'kysely';
import type { Store } from '../storage/db.js';
import type { Database } from '../storage/schema.js';
import type { BatchRows, BatchStore, ChainHead, OrgBatch, Receipt } from './model.js';
import { appendReceipts, emptyChainHead } from './receipt.js';
import { rowsFor } from './rows.js';

// Rows per multi-row INSERT: keeps bound parameters well under PostgreSQL's limit.
const INSERT_CHUNK = 200;

/**
 * Batch commits on PostgreSQL through Kysely. Each organization's chain head is read under a row lock
 * (SELECT ... FOR UPDATE) once per batch; heads are locked in organization order, so two processes
 * can never deadlock on each other's heads. Rows go in with multi-row INSERTs: few round trips.
 */
export class PostgresBatchStore implements BatchStore {
  constructor(private readonly store: Store) {}

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    const out = new Map<string, Receipt>();
    await this.store.db.transaction().execute(async (trx) => {
      for (const batch of batches) {
        const head = await this.lockHead(trx, batch.organizationId);
        const { receipts, head: next } = appendReceipts(
          head,
          batch.items.map(({ item, receiptId }) => ({ ...item.receipt, receipt_id: receiptId })),
        );
        for (const r of receipts) out.set(r.receipt_id, r);
        await this.insertRows(
          trx,
          rowsFor(
            batch.items.map((i) => i.item),
            receipts,
          ),
        );
        await trx
          .updateTable('chain_heads')
          .set({
            sequence: next.sequence,
            last_hash: next.lastHash,
            frontier: JSON.stringify(next.frontier),
            updated_at: new Date().toISOString(),
          })
          .where('organization_id', '=', batch.organizationId)
          .execute();
      }
    });
    return out;
  }

  private async lockHead(trx: Transaction<Database>, org: string): Promise<ChainHead> {
    const select = () => {
      const q = trx.selectFrom('chain_heads').selectAll().where('organization_id', '=', org);
      return (this.store.dialect === 'postgres' ? q.forUpdate() : q).executeTakeFirst();
    };
    let row = await select();
    if (!row) {
      const empty = emptyChainHead();
      await trx
        .insertInto('chain_heads')
        .values({
          organization_id: org,
          sequence: empty.sequence,
          last_hash: empty.lastHash,
          frontier: '[]',
          updated_at: new Date().toISOString(),
        })
        .onConflict((oc) => oc.column('organization_id').doNothing())
        .execute();
      row = await select();
    }
    if (!row) throw new Error(`chain head of organization ${org} could not be created`);
    return { sequence: Number(row.sequence), lastHash: row.last_hash, frontier: JSON.parse(row.frontier) };
  }

  private async insertRows(trx: Transaction<Database>, rows: BatchRows): Promise<void> {
    for (let i = 0; i < rows.decisions.length; i += INSERT_CHUNK) {
      await trx
        .insertInto('decisions')
        .values(rows.decisions.slice(i, i + INSERT_CHUNK))
        .execute();
    }
    for (let i = 0; i < rows.receipts.length; i += INSERT_CHUNK) {
      await trx
        .insertInto('receipts')
        .values(rows.receipts.slice(i, i + INSERT_CHUNK))
        .execute();
    }
    for (const s of rows.sessions) {
      await trx
        .insertInto('session_counters')
        .values(s)
        .onConflict((oc) =>
          oc
            .columns(['organization_id', 'session_id', 'tool_name'])
            .doUpdateSet({ calls: s.calls, cumulative: s.cumulative, updated_at: s.updated_at })
            // Every counted call adds one, so `calls` orders the writes: with several instances two
            // commits can land out of order, and the older one must not overwrite the newer.
            .where('session_counters.calls', '<=', s.calls),
        )
        .execute();
    }
  }
}
