import type { BudgetScope, EconomicConfig, ScopeUsage } from '@svc/policy-engine';
import { type Insertable, type Selectable, sql, type Updateable } from 'kysely';
import { chainedReceiptFor } from '../../ledger/chained.js';
import { uuidv7 } from '../../lib/ids.js';
import type { Db, Store } from '../../storage/db.js';
import type { SpendActionsTable, SpendLedgerTable } from '../../storage/schema.js';
import type { EntryKind } from './model.js';

/** The two receipts an action chains: its authorization's and its commit's. */
export type ReceiptSlot = 'authorize' | 'commit';
/** Per slot: the receipt id, the claim of its write, and the ledger entry the receipt is for. */
const RECEIPT_COLUMNS = {
  authorize: ['authorize_receipt_id', 'authorize_receipt_claimed_at', 'authorization_id'],
  commit: ['commit_receipt_id', 'commit_receipt_claimed_at', 'commit_id'],
} as const;

export type ActionRow = Selectable<SpendActionsTable>;
export type EntryRow = Selectable<SpendLedgerTable>;

/** The three budget keys an entry counts under, with the windows of agent and category. */
export interface ScopeKeys {
  sessionId: string;
  agentId: string;
  category: string;
  agentWindow: string;
  categoryWindow: string;
}

export type NewEntry = Omit<
  Insertable<SpendLedgerTable>,
  'organization_id' | 'sequence' | 'id' | 'created_at' | 'kind'
> & { kind: EntryKind };

/** Effect of an entry on the running sums: spent and reserved deltas. */
function deltas(kind: string, amount: number): { spent: number; reserved: number } {
  switch (kind) {
    case 'reservation':
      return { spent: 0, reserved: amount };
    case 'release':
    case 'expiry':
      return { spent: 0, reserved: -amount };
    case 'commit':
      return { spent: amount, reserved: 0 };
    default:
      return { spent: 0, reserved: 0 };
  }
}

const scopeRows = (k: ScopeKeys) =>
  [
    ['session', k.sessionId, ''],
    ['agent', k.agentId, k.agentWindow],
    ['category', k.category, k.categoryWindow],
  ] as const;

/**
 * The spend ledger of one organization inside a transaction that holds its lock: nothing else
 * appends to it until this transaction ends. Every method is scoped by that organization.
 */
export class LedgerTx {
  private sequence: number;

  /** The sequence the next appended entry gets. */
  get next(): number {
    return this.sequence;
  }

  constructor(
    readonly db: Db,
    readonly organizationId: string,
    sequence: number,
    /** The time of this transaction: every entry it appends is stamped with it. */
    readonly now: string,
  ) {
    this.sequence = sequence;
  }

  /** Appends entries in order and adds their effect to the running sums, in this transaction. */
  async append(entries: readonly NewEntry[]): Promise<EntryRow[]> {
    const rows: EntryRow[] = entries.map((e) => ({
      organization_id: this.organizationId,
      sequence: this.sequence++,
      id: uuidv7(),
      created_at: this.now,
      project_id: e.project_id ?? null,
      kind: e.kind,
      action_id: e.action_id,
      reservation_id: e.reservation_id ?? null,
      session_id: e.session_id,
      agent_id: e.agent_id,
      category: e.category,
      payer: e.payer ?? null,
      tool_name: e.tool_name,
      amount_micros: e.amount_micros,
      decision: e.decision ?? null,
      reason_code: e.reason_code ?? null,
      approval_id: e.approval_id ?? null,
      agent_window: e.agent_window,
      category_window: e.category_window,
      expires_at: e.expires_at ?? null,
    }));
    if (rows.length === 0) return rows;
    await this.db.insertInto('spend_ledger').values(rows).execute();
    // One upsert per balance row, whatever the number of entries (a commit and its release).
    const sums = new Map<
      string,
      { scope: string; key: string; period: string; spent: number; reserved: number }
    >();
    for (const r of rows) {
      const d = deltas(r.kind, r.amount_micros);
      if (d.spent === 0 && d.reserved === 0) continue;
      const keys = {
        sessionId: r.session_id,
        agentId: r.agent_id,
        category: r.category,
        agentWindow: r.agent_window,
        categoryWindow: r.category_window,
      };
      for (const [scope, key, period] of scopeRows(keys)) {
        const id = JSON.stringify([scope, key, period]);
        const s = sums.get(id) ?? { scope, key, period, spent: 0, reserved: 0 };
        sums.set(id, { ...s, spent: s.spent + d.spent, reserved: s.reserved + d.reserved });
      }
    }
    for (const s of sums.values()) {
      await this.db
        .insertInto('spend_balances')
        .values({
          organization_id: this.organizationId,
          scope: s.scope,
          scope_key: s.key,
          period: s.period,
          spent_micros: s.spent,
          reserved_micros: s.reserved,
        })
        .onConflict((oc) =>
          oc.columns(['organization_id', 'scope', 'scope_key', 'period']).doUpdateSet({
            // Integer addition: better-sqlite3 binds a number as REAL, and a sum in double
            // precision drops micros once a balance passes 2^53 (about $9 billion).
            spent_micros: sql`spend_balances.spent_micros + CAST(${s.spent} AS BIGINT)`,
            reserved_micros: sql`spend_balances.reserved_micros + CAST(${s.reserved} AS BIGINT)`,
          }),
        )
        .execute();
    }
    return rows;
  }

  /** Spent and reserved of each scope in its current window. */
  async usage(keys: ScopeKeys): Promise<Record<BudgetScope, ScopeUsage>> {
    const rows = await this.db
      .selectFrom('spend_balances')
      .select(['scope', 'spent_micros', 'reserved_micros'])
      .where('organization_id', '=', this.organizationId)
      .where((eb) =>
        eb.or(
          scopeRows(keys).map(([scope, key, period]) =>
            eb.and([eb('scope', '=', scope), eb('scope_key', '=', key), eb('period', '=', period)]),
          ),
        ),
      )
      .execute();
    const out: Record<BudgetScope, ScopeUsage> = {
      session: { spentMicros: 0, reservedMicros: 0 },
      agent: { spentMicros: 0, reservedMicros: 0 },
      category: { spentMicros: 0, reservedMicros: 0 },
    };
    for (const r of rows) {
      out[r.scope as BudgetScope] = {
        spentMicros: Number(r.spent_micros),
        reservedMicros: Number(r.reserved_micros),
      };
    }
    return out;
  }

  async action(actionId: string): Promise<ActionRow | undefined> {
    return this.db
      .selectFrom('spend_actions')
      .selectAll()
      .where('organization_id', '=', this.organizationId)
      .where('action_id', '=', actionId)
      .executeTakeFirst();
  }

  async putAction(row: ActionRow, exists: boolean): Promise<void> {
    if (!exists) {
      await this.db.insertInto('spend_actions').values(row).execute();
      return;
    }
    const { organization_id: _o, action_id: _a, created_at: _c, ...rest } = row;
    await this.db
      .updateTable('spend_actions')
      .set(rest)
      .where('organization_id', '=', this.organizationId)
      .where('action_id', '=', row.action_id)
      .execute();
  }

  /**
   * Sets only the given columns of an action. Unlike `putAction` it leaves the receipt columns alone,
   * which other processes write outside the ledger lock (a row read before their write must not put
   * back what it read).
   */
  async updateAction(actionId: string, set: Updateable<SpendActionsTable>): Promise<void> {
    await this.db
      .updateTable('spend_actions')
      .set(set)
      .where('organization_id', '=', this.organizationId)
      .where('action_id', '=', actionId)
      .execute();
  }

  /**
   * Reservations past their expiry stop counting: each gets an expiry entry and its action the
   * state `expired`. The ledger runs it before an organization's operations in every transaction.
   */
  async expireDue(): Promise<ActionRow[]> {
    const due = await this.db
      .selectFrom('spend_actions')
      .selectAll()
      .where('organization_id', '=', this.organizationId)
      .where('state', '=', 'reserved')
      .where('expires_at', '<=', this.now)
      .orderBy('expires_at')
      .execute();
    if (due.length === 0) return due;
    const entries: NewEntry[] = due.map((a) => ({
      kind: 'expiry',
      project_id: a.project_id,
      action_id: a.action_id,
      reservation_id: a.reservation_id,
      session_id: a.session_id,
      agent_id: a.agent_id,
      category: a.category,
      payer: (JSON.parse(a.answer) as { payer: string | null }).payer,
      tool_name: (JSON.parse(a.request) as { toolName: string }).toolName,
      amount_micros: Number(a.amount_micros),
      agent_window: a.agent_window,
      category_window: a.category_window,
      expires_at: a.expires_at,
    }));
    await this.append(entries);
    await this.db
      .updateTable('spend_actions')
      .set({ state: 'expired' })
      .where('organization_id', '=', this.organizationId)
      .where(
        'action_id',
        'in',
        due.map((a) => a.action_id),
      )
      .where('state', '=', 'reserved')
      .execute();
    return due;
  }

  /** Approval ids of this session's or agent's actions waiting for a person. */
  async pendingApprovals(sessionId: string, agentId: string): Promise<string[]> {
    const rows = await this.db
      .selectFrom('spend_actions as s')
      .innerJoin('approvals as a', (j) =>
        j.onRef('a.id', '=', 's.approval_id').onRef('a.organization_id', '=', 's.organization_id'),
      )
      .select('a.id')
      .where('s.organization_id', '=', this.organizationId)
      .where('s.state', '=', 'pending_approval')
      .where((eb) => eb.or([eb('s.session_id', '=', sessionId), eb('s.agent_id', '=', agentId)]))
      .where('a.status', '=', 'pending')
      .where('a.expires_at', '>', this.now)
      .orderBy('a.created_at')
      .execute();
    return rows.map((r) => r.id);
  }
}

interface Job {
  organizationId: string;
  now: () => string;
  fn: (tx: LedgerTx) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; err: unknown };

/** Largest number of ledger operations committed in one transaction. */
const MAX_BATCH = 256;

/**
 * Runs operations on organizations' ledgers one at a time across every process: the first operation
 * of an organization in a transaction locks its `spend_heads` row (PostgreSQL: SELECT … FOR UPDATE;
 * SQLite: the transaction is BEGIN IMMEDIATE, which takes the database's write lock), so the read of
 * the balances and the append that depends on it never interleave with another process's.
 *
 * Group commit: operations queued while a transaction runs go into the next one, each inside its
 * own savepoint (a failing one is rolled back alone), so a durable commit costs one fsync per batch,
 * not one per call. Within a batch they run in organization order, so two processes lock heads in
 * the same order and cannot deadlock. Before each operation the reservations lapsed by its time are
 * expired, so no decision counts one and no commit settles one. A promise settles only after COMMIT.
 */
export function createSpendLedger(store: Store) {
  let queue: Job[] = [];
  let running = false;

  async function head(db: Db, org: string, now: string): Promise<number> {
    const select = () => {
      const q = db.selectFrom('spend_heads').select('sequence').where('organization_id', '=', org);
      return (store.dialect === 'postgres' ? q.forUpdate() : q).executeTakeFirst();
    };
    let row = await select();
    if (!row) {
      await db
        .insertInto('spend_heads')
        .values({ organization_id: org, sequence: 0, updated_at: now })
        .onConflict((oc) => oc.column('organization_id').doNothing())
        .execute();
      row = await select();
    }
    if (!row) throw new Error(`spend ledger head of organization ${org} could not be created`);
    return Number(row.sequence);
  }

  async function transaction(fn: (db: Db) => Promise<void>): Promise<void> {
    if (store.dialect === 'postgres') {
      await store.db.transaction().execute(fn);
      return;
    }
    // Kysely's SQLite transactions BEGIN DEFERRED; IMMEDIATE takes the write lock up front, so a
    // second process waits (busy_timeout) instead of failing on a lock upgrade.
    await store.db.connection().execute(async (conn) => {
      await sql`BEGIN IMMEDIATE`.execute(conn);
      try {
        await fn(conn);
        await sql`COMMIT`.execute(conn);
      } catch (err) {
        await sql`ROLLBACK`.execute(conn).catch(() => {});
        throw err;
      }
    });
  }

  async function runBatch(batch: Job[]): Promise<void> {
    const outcomes: Outcome[] = [];
    try {
      await transaction(async (db) => {
        // The next sequence of each organization in this batch, as of the last operation that held.
        const sequences = new Map<string, number>();
        for (const job of batch) {
          const org = job.organizationId;
          // Each operation runs at its own time, and what lapsed by then is expired first: a
          // reservation due between an earlier operation of the batch and this one must not count
          // (nor be committed) here.
          const at = job.now();
          const housekeeping = new LedgerTx(db, org, sequences.get(org) ?? (await head(db, org, at)), at);
          await housekeeping.expireDue();
          sequences.set(org, housekeeping.next);
          await sql`SAVEPOINT spend_op`.execute(db);
          try {
            const tx = new LedgerTx(db, org, sequences.get(org)!, at);
            const value = await job.fn(tx);
            await sql`RELEASE SAVEPOINT spend_op`.execute(db);
            sequences.set(org, tx.next);
            outcomes.push({ ok: true, value });
          } catch (err) {
            await sql`ROLLBACK TO SAVEPOINT spend_op`.execute(db);
            await sql`RELEASE SAVEPOINT spend_op`.execute(db);
            outcomes.push({ ok: false, err });
          }
        }
        const at = new Date().toISOString();
        for (const [org, sequence] of sequences) {
          await db
            .updateTable('spend_heads')
            .set({ sequence, updated_at: at })
            .where('organization_id', '=', org)
            .execute();
        }
      });
    } catch (err) {
      for (const job of batch) job.reject(err);
      return;
    }
    for (const [i, job] of batch.entries()) {
      const o = outcomes[i]!;
      if (o.ok) job.resolve(o.value);
      else job.reject(o.err);
    }
  }

  async function drain(): Promise<void> {
    try {
      while (queue.length > 0) {
        const batch = queue.slice(0, MAX_BATCH);
        queue = queue.slice(MAX_BATCH);
        // Stable sort: each organization's operations keep their arrival order.
        batch.sort((a, b) =>
          a.organizationId < b.organizationId ? -1 : a.organizationId > b.organizationId ? 1 : 0,
        );
        await runBatch(batch);
      }
    } finally {
      running = false;
    }
  }

  return {
    /** Runs `fn` holding the organization's ledger lock; resolves once its transaction committed. */
    locked<T>(organizationId: string, now: () => string, fn: (tx: LedgerTx) => Promise<T>): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        queue.push({ organizationId, now, fn, resolve: resolve as (v: unknown) => void, reject });
        if (running) return;
        running = true;
        // The next turn, so that every request parsed in this I/O turn joins the batch.
        setImmediate(() => void drain());
      });
    },

    /**
     * Claims the write of the receipt of an action's entry (its authorization or its commit): false
     * when the entry has its receipt, is no longer the action's (it was decided again), or another
     * request holds a claim. `staleBefore` also takes over a claim older than that (its writer died).
     */
    async claimReceipt(
      organizationId: string,
      actionId: string,
      slot: ReceiptSlot,
      entryId: string,
      now: string,
      staleBefore: string | null,
    ): Promise<boolean> {
      const [id, claimed, entry] = RECEIPT_COLUMNS[slot];
      const r = await store.db
        .updateTable('spend_actions')
        .set({ [claimed]: now })
        .where('organization_id', '=', organizationId)
        .where('action_id', '=', actionId)
        .where(entry, '=', entryId)
        .where(id, 'is', null)
        .where((eb) =>
          staleBefore === null
            ? eb(claimed, 'is', null)
            : eb.or([eb(claimed, 'is', null), eb(claimed, '<', staleBefore)]),
        )
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },

    /** Stores the receipt of the claim made at `claimedAt` on that entry (nothing if anything moved on). */
    async setReceipt(
      organizationId: string,
      actionId: string,
      slot: ReceiptSlot,
      entryId: string,
      claimedAt: string,
      receiptId: string,
    ): Promise<void> {
      const [id, claimed, entry] = RECEIPT_COLUMNS[slot];
      await store.db
        .updateTable('spend_actions')
        .set({ [id]: receiptId, [claimed]: null })
        .where('organization_id', '=', organizationId)
        .where('action_id', '=', actionId)
        .where(entry, '=', entryId)
        .where(id, 'is', null)
        .where(claimed, '=', claimedAt)
        .execute();
    },

    /** Gives a claim back after its write failed, so that the next request writes the receipt at once. */
    async releaseReceipt(
      organizationId: string,
      actionId: string,
      slot: ReceiptSlot,
      entryId: string,
      claimedAt: string,
    ) {
      const [, claimed, entry] = RECEIPT_COLUMNS[slot];
      await store.db
        .updateTable('spend_actions')
        .set({ [claimed]: null })
        .where('organization_id', '=', organizationId)
        .where('action_id', '=', actionId)
        .where(entry, '=', entryId)
        .where(claimed, '=', claimedAt)
        .execute();
    },

    /** The slot's entry, its receipt (once written) and its claim; undefined without the action. */
    async receiptState(
      organizationId: string,
      actionId: string,
      slot: ReceiptSlot,
    ): Promise<{ entryId: string | null; receiptId: string | null; claimedAt: string | null } | undefined> {
      const [id, claimed, entry] = RECEIPT_COLUMNS[slot];
      const row = await store.db
        .selectFrom('spend_actions')
        .select([`${entry} as entryId`, `${id} as receiptId`, `${claimed} as claimedAt`])
        .where('organization_id', '=', organizationId)
        .where('action_id', '=', actionId)
        .executeTakeFirst();
      return row as
        | { entryId: string | null; receiptId: string | null; claimedAt: string | null }
        | undefined;
    },

    /** The receipt already chained for a ledger entry, if any (a writer may have died before storing its id). */
    receiptFor: (organizationId: string, entryId: string) =>
      chainedReceiptFor(store.db, organizationId, entryId),

    /**
     * Actions of any organization owing a receipt the sweep may write: an authorization or a commit
     * without its receipt whose claim is absent or older than `staleBefore` (a fresh claim belongs to
     * its writer). Oldest decisions first, at most `limit`.
     */
    async owingReceipts(staleBefore: string, limit: number): Promise<ActionRow[]> {
      // One read per slot, each served by its partial index (migration 0025), merged in order; the
      // commit slot's read repeats its index's `commit_id is not null`.
      const owing = (slot: 'authorize' | 'commit') =>
        store.db
          .selectFrom('spend_actions')
          .selectAll()
          .$if(slot === 'commit', (q) => q.where('commit_id', 'is not', null))
          .where(`${slot}_receipt_id`, 'is', null)
          .where((eb) =>
            eb.or([
              eb(`${slot}_receipt_claimed_at`, 'is', null),
              eb(`${slot}_receipt_claimed_at`, '<', staleBefore),
            ]),
          )
          .orderBy('decided_at')
          .orderBy('organization_id')
          .orderBy('action_id')
          .limit(limit)
          .execute();
      const [authorizations, commits] = await Promise.all([owing('authorize'), owing('commit')]);
      const byAction = new Map<string, ActionRow>();
      for (const row of [...authorizations, ...commits]) {
        byAction.set(JSON.stringify([row.organization_id, row.action_id]), row);
      }
      const order = (r: ActionRow) => [r.decided_at, r.organization_id, r.action_id];
      return [...byAction.values()]
        .sort((x, y) => {
          const [a, b] = [order(x), order(y)];
          for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
          return 0;
        })
        .slice(0, limit);
    },

    /** One ledger entry of an organization by its id. */
    async entry(organizationId: string, id: string): Promise<EntryRow | undefined> {
      return store.db
        .selectFrom('spend_ledger')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    async entries(organizationId: string): Promise<EntryRow[]> {
      return store.db
        .selectFrom('spend_ledger')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('sequence')
        .execute();
    },

    async balances(organizationId: string) {
      return store.db
        .selectFrom('spend_balances')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .execute();
    },
  };
}

export type SpendLedger = ReturnType<typeof createSpendLedger>;

/** Economic configurations: the organization's (scope key '') and each project's. */
export function createEconomicConfigRepository(db: Db) {
  return {
    async get(
      organizationId: string,
      projectId: string | null,
    ): Promise<{ config: EconomicConfig; updatedAt: string } | undefined> {
      const row = await db
        .selectFrom('economic_configs')
        .select(['config', 'updated_at'])
        .where('organization_id', '=', organizationId)
        .where('scope_key', '=', projectId ?? '')
        .executeTakeFirst();
      return row && { config: JSON.parse(row.config), updatedAt: row.updated_at };
    },

    async put(
      organizationId: string,
      projectId: string | null,
      config: EconomicConfig,
      now: string,
    ): Promise<void> {
      await db
        .insertInto('economic_configs')
        .values({
          organization_id: organizationId,
          scope_key: projectId ?? '',
          project_id: projectId,
          config: JSON.stringify(config),
          created_at: now,
          updated_at: now,
        })
        .onConflict((oc) =>
          oc
            .columns(['organization_id', 'scope_key'])
            .doUpdateSet({ config: JSON.stringify(config), updated_at: now }),
        )
        .execute();
    },
  };
}

export type EconomicConfigRepository = ReturnType<typeof createEconomicConfigRepository>;
