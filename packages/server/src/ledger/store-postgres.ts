import { CompiledQuery, type Insertable, type Transaction } from 'kysely';
import type { Store } from '../storage/db.js';
import type { Database, DecisionsTable, SessionCountersTable } from '../storage/schema.js';
import type { BatchRows, BatchStore, ChainHead, OrgBatch, Receipt } from './model.js';
import { appendReceipts, emptyChainHead } from './receipt.js';
import { rowsFor } from './rows.js';

/**
 * Batch commits on PostgreSQL through Kysely. Each organization's chain head is read under a row lock
 * (SELECT ... FOR UPDATE) once per batch; heads are locked in organization order, so two processes
 * can never deadlock on each other's heads. An organization's rows and head go in with one statement.
 */
export class PostgresBatchStore implements BatchStore {
  constructor(private readonly store: Store) {}

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    const out = new Map<string, Receipt>();
    await this.store.db.transaction().execute(async (trx) => {
      for (const batch of batches) {
        const head = await this.lockHead(trx, batch.organizationId);
        const {
          receipts,
          head: next,
          payloads,
        } = appendReceipts(
          head,
          batch.items.map(({ item, receiptId }) => ({ ...item.receipt, receipt_id: receiptId })),
        );
        for (const r of receipts) out.set(r.receipt_id, r);
        const rows = rowsFor(
          batch.items.map((i) => i.item),
          receipts,
          payloads,
        );
        await this.writeRows(trx, batch.organizationId, rows, next);
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

  /**
   * All of one organization's rows and its new chain head in one statement: column arrays unnested
   * into each table (data-modifying CTEs), so the statement text and its parameter count are the
   * same for any batch size. One round trip instead of one per table and per session counter, and
   * PostgreSQL parses and plans a 38-parameter statement instead of a 20-column multi-row VALUES.
   */
  private async writeRows(
    trx: Transaction<Database>,
    organizationId: string,
    rows: BatchRows,
    head: ChainHead,
  ): Promise<void> {
    const params: unknown[] = [];
    for (const c of DECISION_COLUMNS) params.push(rows.decisions.map((d) => d[c.name] ?? null));
    for (const c of RECEIPT_COLUMNS) params.push(rows.receipts.map((r) => r[c.name] ?? null));
    for (const c of SESSION_COLUMNS) params.push(rows.sessions.map((r) => r[c.name] ?? null));
    params.push(head.sequence, head.lastHash, JSON.stringify(head.frontier), new Date().toISOString());
    params.push(organizationId);
    await trx.executeQuery(CompiledQuery.raw(WRITE_BATCH_SQL, params));
  }
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
  return `INSERT INTO ${table} (${columns.map((c) => c.name).join(', ')}) SELECT * FROM unnest(${arrays})`;
}

const S = DECISION_COLUMNS.length + RECEIPT_COLUMNS.length + 1;
const H = S + SESSION_COLUMNS.length;
// Session counters: every counted call adds one, so `calls` orders the writes. With several
// instances two commits can land out of order, and the older one must not overwrite the newer.
// rowsFor keeps one row per counter, so no row is affected twice by the statement.
const WRITE_BATCH_SQL = `WITH d AS (${unnestInsert('decisions', DECISION_COLUMNS, 1)}),
  r AS (${unnestInsert('receipts', RECEIPT_COLUMNS, DECISION_COLUMNS.length + 1)}),
  s AS (${unnestInsert('session_counters', SESSION_COLUMNS, S)}
    ON CONFLICT (organization_id, session_id, tool_name) DO UPDATE SET
      calls = excluded.calls, cumulative = excluded.cumulative, updated_at = excluded.updated_at
    WHERE session_counters.calls <= excluded.calls)
UPDATE chain_heads SET sequence = $${H}, last_hash = $${H + 1}, frontier = $${H + 2}, updated_at = $${H + 3}
WHERE organization_id = $${H + 4}`;
