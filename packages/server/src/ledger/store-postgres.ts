import { CompiledQuery, type Insertable, type Kysely, type Transaction } from 'kysely';
import type { Store } from '../storage/db.js';
import type { Database, DecisionsTable, SessionCountersTable } from '../storage/schema.js';
import type { BatchStore, ChainHead, OrgBatch, Receipt } from './model.js';
import { appendReceipts, emptyChainHead } from './receipt.js';
import { rowsFor } from './rows.js';

/**
 * Organizations whose chain head a PostgresBatchStore remembers (the most recently written), and
 * whose recent contention it remembers.
 */
const REMEMBERED_HEADS = 1024;

export interface PostgresBatchStoreOptions {
  /**
   * How long (ms, default 1,000) an organization's head is read under the lock again after another
   * process turned out to have extended its chain: while two processes take turns on one chain, a
   * remembered head would be stale at almost every batch, and each would cost a wasted statement.
   */
  contendedMs?: number;
}

/**
 * Batch commits on PostgreSQL through Kysely. Each organization's rows and head go in with one
 * statement that moves the head only if it is still the one the batch's receipts extend (same
 * sequence and last hash; PostgreSQL re-checks that condition on the newest row version if another
 * process moved it meanwhile), and inserts the rows only if it moved. The store remembers the head
 * it wrote last for each organization: a batch of one such organization is that statement alone,
 * without a transaction; a batch of several runs their statements in one transaction, reading
 * under a row lock (SELECT ... FOR UPDATE) only the heads it does not remember. When a remembered
 * head has moved, that statement writes nothing and the organization's part runs again on its head
 * read under the lock (a batch of one then goes through a transaction too). Heads are locked in
 * organization order, so two processes can never deadlock on each other's heads, and a chain never
 * forks.
 */
export class PostgresBatchStore implements BatchStore {
  /** The head each organization's chain had after this store's last write to it, oldest first. */
  private readonly heads = new Map<string, ChainHead>();
  /** Organizations whose chain another process extended lately: until when to lock their head. */
  private readonly contended = new Map<string, number>();
  private readonly contendedMs: number;

  constructor(
    private readonly store: Store,
    options: PostgresBatchStoreOptions = {},
  ) {
    this.contendedMs = options.contendedMs ?? 1000;
  }

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    const only = batches.length === 1 ? batches[0]! : undefined;
    const known = only && this.heads.get(only.organizationId);
    if (only && known) {
      const written = await writeOrg(this.store.db, only, known);
      if (written) {
        this.remember(only.organizationId, written.next);
        return written.out;
      }
      this.moved(only.organizationId);
    }
    const out = new Map<string, Receipt>();
    const nexts: [string, ChainHead][] = [];
    // Read committed whatever the database's default: a statement that finds a remembered head moved
    // and the lock that follows it must see the newest committed head.
    await this.store.db
      .transaction()
      .setIsolationLevel('read committed')
      .execute(async (trx) => {
        for (const batch of batches) {
          const org = batch.organizationId;
          const known = this.heads.get(org);
          let written = known ? await writeOrg(trx, batch, known) : null;
          if (!written) {
            if (known) this.moved(org);
            // Organizations come in order, so this lock is taken after those of the earlier ones.
            written = await writeOrg(trx, batch, await this.lockHead(trx, org));
            if (!written) throw new Error(`chain head of organization ${org} moved under its lock`);
          }
          for (const [id, r] of written.out) out.set(id, r);
          nexts.push([org, written.next]);
        }
      });
    for (const [org, next] of nexts) this.remember(org, next);
    return out;
  }

  /** Another process extended the organization's chain: its head is locked for a while. */
  private moved(org: string): void {
    this.heads.delete(org);
    this.contended.delete(org);
    this.contended.set(org, performance.now() + this.contendedMs);
    if (this.contended.size > REMEMBERED_HEADS) this.contended.delete(this.contended.keys().next().value!);
  }

  private remember(org: string, head: ChainHead): void {
    const until = this.contended.get(org);
    if (until !== undefined) {
      if (performance.now() < until) return;
      this.contended.delete(org);
    }
    this.heads.delete(org);
    this.heads.set(org, head);
    if (this.heads.size > REMEMBERED_HEADS) this.heads.delete(this.heads.keys().next().value!);
  }

  private async lockHead(trx: Transaction<Database>, org: string): Promise<ChainHead> {
    const select = () =>
      trx
        .selectFrom('chain_heads')
        .selectAll()
        .where('organization_id', '=', org)
        .forUpdate()
        .executeTakeFirst();
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
}

/**
 * Writes one organization's part of a batch extending `head`, if the head is still `head`: its
 * receipts, and the statement that writes all of its rows and moves its head, which answers whether
 * it did (column arrays unnested into each table by data-modifying CTEs that insert only once the
 * head moved, so the statement text and its parameter count are the same for any batch size: one
 * round trip instead of one per table and per session counter). Null: the head had moved, and
 * nothing was written.
 */
async function writeOrg(
  db: Pick<Kysely<Database>, 'executeQuery'>,
  batch: OrgBatch,
  head: ChainHead,
): Promise<{ out: Map<string, Receipt>; next: ChainHead } | null> {
  const {
    receipts,
    head: next,
    payloads,
  } = appendReceipts(
    head,
    batch.items.map(({ item, receiptId }) => ({ ...item.receipt, receipt_id: receiptId })),
  );
  const rows = rowsFor(
    batch.items.map((i) => i.item),
    receipts,
    payloads,
  );
  const params: unknown[] = [];
  for (const c of DECISION_COLUMNS) params.push(rows.decisions.map((d) => d[c.name] ?? null));
  for (const c of RECEIPT_COLUMNS) params.push(rows.receipts.map((r) => r[c.name] ?? null));
  for (const c of SESSION_COLUMNS) params.push(rows.sessions.map((r) => r[c.name] ?? null));
  params.push(next.sequence, next.lastHash, JSON.stringify(next.frontier), new Date().toISOString());
  params.push(batch.organizationId, head.sequence, head.lastHash);
  const { rows: answer } = await db.executeQuery<{ moved: boolean }>(
    CompiledQuery.raw(WRITE_BATCH_SQL, params),
  );
  if (!answer[0]?.moved) return null;
  const out = new Map<string, Receipt>();
  for (const r of receipts) out.set(r.receipt_id, r);
  return { out, next };
}

interface Column<T> {
  name: keyof T & string;
  type: 'text' | 'real' | 'integer' | 'bigint';
}

const DECISION_COLUMNS: Column<Insertable<DecisionsTable>>[] = [
  { name: 'id', type: 'text' },
  { name: 'organization_id', type: 'text' },
  { name: 'project_id', type: 'text' },
  { name: 'tool_name', type: 'text' },
  { name: 'arguments', type: 'text' },
  { name: 'context', type: 'text' },
  { name: 'decision', type: 'text' },
  { name: 'mode', type: 'text' },
  { name: 'reason', type: 'text' },
  { name: 'failed_argument', type: 'text' },
  { name: 'matched_exception', type: 'text' },
  { name: 'validations', type: 'text' },
  { name: 'latency_ms', type: 'real' },
  { name: 'source', type: 'text' },
  { name: 'policy_version', type: 'integer' },
  { name: 'receipt_id', type: 'text' },
  { name: 'receipt_hash', type: 'text' },
  { name: 'previous_receipt_hash', type: 'text' },
  { name: 'merkle_root', type: 'text' },
  { name: 'created_at', type: 'text' },
];

const RECEIPT_COLUMNS: Column<Insertable<Database['receipts']>>[] = [
  { name: 'organization_id', type: 'text' },
  { name: 'sequence', type: 'bigint' },
  { name: 'receipt_id', type: 'text' },
  { name: 'decision_id', type: 'text' },
  { name: 'receipt_hash', type: 'text' },
  { name: 'payload', type: 'text' },
  { name: 'created_at', type: 'text' },
];

const SESSION_COLUMNS: Column<Insertable<SessionCountersTable>>[] = [
  { name: 'organization_id', type: 'text' },
  { name: 'session_id', type: 'text' },
  { name: 'tool_name', type: 'text' },
  { name: 'calls', type: 'integer' },
  { name: 'cumulative', type: 'text' },
  { name: 'updated_at', type: 'text' },
];

function unnestInsert(
  table: string,
  columns: readonly { name: string; type: string }[],
  firstParam: number,
): string {
  const arrays = columns.map((c, i) => `$${firstParam + i}::${c.type}[]`).join(', ');
  return `INSERT INTO ${table} (${columns.map((c) => c.name).join(', ')})
    SELECT * FROM unnest(${arrays}) WHERE EXISTS (SELECT 1 FROM h)`;
}

const S = DECISION_COLUMNS.length + RECEIPT_COLUMNS.length + 1;
const H = S + SESSION_COLUMNS.length;
// The head moves first (h), and only if it is where the receipts start; every insert reads h, so
// none happens without it. Session counters: every counted call adds one, so `calls` orders the
// writes. With several instances two commits can land out of order, and the older one must not
// overwrite the newer. rowsFor keeps one row per counter, so no row is affected twice.
const WRITE_BATCH_SQL = `WITH h AS (
    UPDATE chain_heads SET sequence = $${H}, last_hash = $${H + 1}, frontier = $${H + 2}, updated_at = $${H + 3}
    WHERE organization_id = $${H + 4} AND sequence = $${H + 5} AND last_hash = $${H + 6}
    RETURNING 1),
  d AS (${unnestInsert('decisions', DECISION_COLUMNS, 1)}),
  r AS (${unnestInsert('receipts', RECEIPT_COLUMNS, DECISION_COLUMNS.length + 1)}),
  s AS (${unnestInsert('session_counters', SESSION_COLUMNS, S)}
    ON CONFLICT (organization_id, session_id, tool_name) DO UPDATE SET
      calls = excluded.calls, cumulative = excluded.cumulative, updated_at = excluded.updated_at
    WHERE session_counters.calls <= excluded.calls)
SELECT EXISTS (SELECT 1 FROM h) AS moved`;
