import type { FastifyBaseLogger } from 'fastify';
import type { Insertable, Transaction } from 'kysely';
import { uuidv7 } from '../../lib/ids.js';
import type { Store } from '../../storage/db.js';
import type { Database, DecisionsTable, SessionCountersTable } from '../../storage/schema.js';
import {
  appendReceipts,
  type ChainHead,
  emptyChainHead,
  type Receipt,
  type ReceiptFields,
} from '../receipts/receipt.js';

/** One durable write: a receipt, optionally with the decision it records and a session counter update. */
export interface WriteItem {
  receipt: ReceiptFields;
  /** The decision row without its receipt columns (filled in from the receipt). */
  decision?: Omit<
    Insertable<DecisionsTable>,
    'receipt_id' | 'receipt_hash' | 'previous_receipt_hash' | 'merkle_root'
  >;
  /** Absolute counter values after this call. */
  session?: Insertable<SessionCountersTable>;
}

interface Pending {
  item: WriteItem;
  receiptId: string;
  resolve: (r: Receipt) => void;
  reject: (e: unknown) => void;
}

export interface DecisionWriterOptions {
  /** Largest batch committed in one transaction. */
  maxBatch?: number;
  log?: FastifyBaseLogger;
}

// Rows per multi-row INSERT: keeps bound parameters well under both stores' limits.
const INSERT_CHUNK = 200;

/**
 * Group commit for decisions and receipts. Calls arriving while a transaction is in flight (or
 * within the same event-loop tick) are committed together in the next one, so durability costs one
 * fsync per batch instead of one per call. Each organization's chain head is read under a row lock
 * (PostgreSQL: SELECT ... FOR UPDATE) once per batch, never once per decision, so several processes
 * on one database extend the chain without forking it. A promise resolves only after COMMIT.
 */
export class DecisionWriter {
  private queue: Pending[] = [];
  private flushing = false;
  private scheduled = false;
  private closed = false;
  private idle: Promise<void> = Promise.resolve();
  private markIdle: (() => void) | null = null;
  private readonly maxBatch: number;

  constructor(
    private readonly store: Store,
    private readonly options: DecisionWriterOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 512;
  }

  /** Resolves with the committed receipt once the item is durable. */
  write(item: WriteItem): Promise<Receipt> {
    if (this.closed) return Promise.reject(new Error('decision writer is closed'));
    return new Promise<Receipt>((resolve, reject) => {
      this.queue.push({ item, receiptId: uuidv7(), resolve, reject });
      if (this.queue.length === 1 && !this.flushing) {
        this.idle = new Promise((r) => {
          this.markIdle = r;
        });
      }
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.flushing || this.scheduled) return;
    this.scheduled = true;
    // setImmediate lets every request parsed in this I/O turn join the batch.
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          const receipts = await this.commit(batch);
          for (const [i, p] of batch.entries()) p.resolve(receipts[i]!);
        } catch (err) {
          if (batch.length === 1) {
            this.options.log?.error({ err }, 'decision failed to commit');
            batch[0]!.reject(err);
            continue;
          }
          // One bad item must not fail its neighbours: retry each alone.
          for (const p of batch) {
            try {
              p.resolve((await this.commit([p]))[0]!);
            } catch (itemErr) {
              this.options.log?.error({ err: itemErr }, 'decision failed to commit');
              p.reject(itemErr);
            }
          }
        }
      }
    } finally {
      this.flushing = false;
      this.markIdle?.();
      this.markIdle = null;
    }
  }

  private async commit(batch: Pending[]): Promise<Receipt[]> {
    const byOrg = new Map<string, Pending[]>();
    for (const p of batch) {
      const org = p.item.receipt.organization_id;
      const list = byOrg.get(org);
      if (list) list.push(p);
      else byOrg.set(org, [p]);
    }
    const result = new Map<Pending, Receipt>();
    // Locks are taken in a fixed order so two processes can never deadlock on each other's heads.
    const orgs = [...byOrg.keys()].sort();
    await this.store.db.transaction().execute(async (trx) => {
      for (const org of orgs) {
        const items = byOrg.get(org)!;
        const head = await this.lockHead(trx, org);
        const { receipts, head: next } = appendReceipts(
          head,
          items.map((p) => ({ ...p.item.receipt, receipt_id: p.receiptId })),
        );
        for (const [i, p] of items.entries()) result.set(p, receipts[i]!);
        await this.insertRows(trx, items, receipts);
        await trx
          .updateTable('chain_heads')
          .set({
            sequence: next.sequence,
            last_hash: next.lastHash,
            frontier: JSON.stringify(next.frontier),
            updated_at: new Date().toISOString(),
          })
          .where('organization_id', '=', org)
          .execute();
      }
    });
    return batch.map((p) => result.get(p)!);
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

  private async insertRows(trx: Transaction<Database>, items: Pending[], receipts: Receipt[]): Promise<void> {
    const decisions: Insertable<DecisionsTable>[] = [];
    const receiptRows: Insertable<Database['receipts']>[] = [];
    const sessions = new Map<string, Insertable<SessionCountersTable>>();
    items.forEach((p, i) => {
      const r = receipts[i]!;
      if (p.item.decision) {
        decisions.push({
          ...p.item.decision,
          receipt_id: r.receipt_id,
          receipt_hash: r.receipt_hash,
          previous_receipt_hash: r.previous_receipt_hash,
          merkle_root: r.merkle_root,
        });
      }
      receiptRows.push({
        organization_id: r.organization_id,
        sequence: r.sequence,
        receipt_id: r.receipt_id,
        decision_id: r.decision_id,
        receipt_hash: r.receipt_hash,
        payload: JSON.stringify(r),
        created_at: r.timestamp,
      });
      const s = p.item.session;
      // Later items carry later absolute values: keep the last per counter.
      if (s) sessions.set(`${s.session_id}\u0000${s.tool_name}`, s);
    });
    for (let i = 0; i < decisions.length; i += INSERT_CHUNK) {
      await trx
        .insertInto('decisions')
        .values(decisions.slice(i, i + INSERT_CHUNK))
        .execute();
    }
    for (let i = 0; i < receiptRows.length; i += INSERT_CHUNK) {
      await trx
        .insertInto('receipts')
        .values(receiptRows.slice(i, i + INSERT_CHUNK))
        .execute();
    }
    for (const s of sessions.values()) {
      await trx
        .insertInto('session_counters')
        .values(s)
        .onConflict((oc) =>
          oc
            .columns(['organization_id', 'session_id', 'tool_name'])
            .doUpdateSet({
              calls: s.calls,
              cumulative: s.cumulative,
              updated_at: s.updated_at,
            })
            // Every counted call adds one, so `calls` orders the writes: with several instances two
            // commits can land out of order, and the older one must not overwrite the newer.
            .where('session_counters.calls', '<=', s.calls),
        )
        .execute();
    }
  }

  /** Waits until everything accepted so far is committed (or failed). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.flushing || this.scheduled) await this.idle;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.drain();
  }
}
