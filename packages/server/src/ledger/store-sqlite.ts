import type SQLite from 'better-sqlite3';
import { openSqliteHandle, type Store } from '../storage/db.js';
import type { BatchStore, ChainHead, OrgBatch, Receipt } from './model.js';
import { appendReceipts, emptyChainHead } from './receipt.js';
import { furthest } from './rows.js';
import {
  DECISION_INPUT_COLUMNS,
  encodeBatches,
  receiptInputOf,
  SESSION_COLUMNS,
  type WireBatch,
} from './wire.js';

const insertSql = (table: string, columns: readonly string[]) =>
  `INSERT INTO ${table} (${columns.join(', ')}) VALUES (${columns.map(() => '?').join(', ')})`;

/** Commits whole batches synchronously on one SQLite connection and returns their receipts, in order. */
export type SqliteCommit = (batches: readonly WireBatch[]) => Map<string, Receipt>;

/**
 * Batch commits on the embedded store with statements prepared once and run synchronously inside
 * one IMMEDIATE transaction: no SQL is built or parsed per call, and rows are bound by position
 * from the batch's arrays (wire.ts). Prepare it once the schema is migrated. Used on the event loop
 * (SqliteBatchStore, NoWaitSqliteBatchStore) or in the writer thread (thread.ts).
 */
export function createSqliteCommit(db: SQLite.Database): SqliteCommit {
  const selectHead = db.prepare(
    'SELECT sequence, last_hash, frontier FROM chain_heads WHERE organization_id = ?',
  );
  const insertHead = db.prepare(
    'INSERT INTO chain_heads (organization_id, sequence, last_hash, frontier, updated_at) VALUES (?, ?, ?, ?, ?)',
  );
  const updateHead = db.prepare(
    'UPDATE chain_heads SET sequence = ?, last_hash = ?, frontier = ?, updated_at = ? WHERE organization_id = ?',
  );
  const insertDecision = db.prepare(
    insertSql('decisions', [
      ...DECISION_INPUT_COLUMNS,
      'receipt_id',
      'receipt_hash',
      'previous_receipt_hash',
      'merkle_root',
    ]),
  );
  const insertReceipt = db.prepare(
    insertSql('receipts', [
      'organization_id',
      'sequence',
      'receipt_id',
      'decision_id',
      'receipt_hash',
      'payload',
      'created_at',
    ]),
  );
  const upsertSession = db.prepare(
    `${insertSql('session_counters', SESSION_COLUMNS)}
     ON CONFLICT (organization_id, session_id, tool_name) DO UPDATE SET
       calls = excluded.calls, cumulative = excluded.cumulative, updated_at = excluded.updated_at
     WHERE session_counters.calls <= excluded.calls`,
  );
  // Where the counter's identity and its calls are in a SESSION_COLUMNS row.
  const SESSION_ID = SESSION_COLUMNS.indexOf('session_id');
  const TOOL_NAME = SESSION_COLUMNS.indexOf('tool_name');
  const CALLS = SESSION_COLUMNS.indexOf('calls');

  const loadHead = (org: string): ChainHead => {
    const row = selectHead.get(org) as { sequence: number; last_hash: string; frontier: string } | undefined;
    if (row)
      return {
        sequence: Number(row.sequence),
        lastHash: row.last_hash,
        frontier: JSON.parse(row.frontier),
      };
    const empty = emptyChainHead();
    insertHead.run(org, empty.sequence, empty.lastHash, '[]', new Date().toISOString());
    return empty;
  };

  const tx = db.transaction((batches: readonly WireBatch[]) => {
    const out = new Map<string, Receipt>();
    for (const batch of batches) {
      const { receipts, head, payloads } = appendReceipts(
        loadHead(batch.organizationId),
        batch.items.map(receiptInputOf),
      );
      const sessions: unknown[][] = [];
      for (let i = 0; i < receipts.length; i++) {
        const [, , decision, session] = batch.items[i]!;
        const r = receipts[i]!;
        if (decision) {
          insertDecision.run(decision, r.receipt_id, r.receipt_hash, r.previous_receipt_hash, r.merkle_root);
        }
        insertReceipt.run(
          r.organization_id,
          r.sequence,
          r.receipt_id,
          r.decision_id,
          r.receipt_hash,
          payloads[i],
          r.timestamp,
        );
        if (session) sessions.push(session);
      }
      const counters = furthest(sessions, (s) => [
        s[SESSION_ID] as string,
        s[TOOL_NAME] as string,
        s[CALLS] as number,
      ]);
      for (const s of counters) upsertSession.run(s);
      updateHead.run(
        head.sequence,
        head.lastHash,
        JSON.stringify(head.frontier),
        new Date().toISOString(),
        batch.organizationId,
      );
      for (const r of receipts) out.set(r.receipt_id, r);
    }
    return out;
  });
  // IMMEDIATE takes the write lock at BEGIN, so a writer on another connection waits there for its
  // busy timeout (or, with none, fails at once with nothing written) instead of failing later on a
  // lock upgrade.
  return (batches) => tx.immediate(batches);
}

/**
 * The embedded store's batch commit on the calling thread, on the store's own connection. It holds
 * Kysely's connection lock while it runs, so it never interleaves with another transaction on that
 * connection.
 */
export class SqliteBatchStore implements BatchStore {
  private run: SqliteCommit | null = null;

  constructor(private readonly store: Store) {}

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    return this.store.db.connection().execute(async () => {
      // Prepared on first use, when the schema is certainly migrated.
      this.run ??= createSqliteCommit(this.store.sqlite as SQLite.Database);
      return this.run(encodeBatches(batches));
    });
  }
}

/**
 * Batch commits on the calling thread through a connection of their own that never waits for
 * another connection's write lock: while one is held, the commit fails at once (SQLITE_BUSY,
 * nothing written) instead of blocking the thread for up to the busy timeout. It never checkpoints
 * the WAL either; its owner has that done elsewhere (BatchStore.checkpoint). Opened on first use.
 */
export class NoWaitSqliteBatchStore implements BatchStore {
  private db: SQLite.Database | null = null;
  private run: SqliteCommit | null = null;

  constructor(private readonly path: string) {}

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    if (!this.run) {
      // No wait from the first statement on: opening while another connection writes fails at once too.
      const db = openSqliteHandle(this.path, 0);
      try {
        // A checkpoint takes as long as several commits: the caller has another connection do it.
        db.pragma('wal_autocheckpoint = 0');
        this.run = createSqliteCommit(db);
      } catch (err) {
        // Opened again at the next commit.
        db.close();
        throw err;
      }
      this.db = db;
    }
    return this.run(encodeBatches(batches));
  }

  async close(): Promise<void> {
    this.db?.close();
    this.db = null;
    this.run = null;
  }
}
