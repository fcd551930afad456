import { statSync } from 'node:fs';
import type { Worker } from 'node:worker_threads';
import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { createTenant, TEST_PG_URL } from '../../test/helpers.js';
import { decisionItem } from '../../test/ledger.js';
import { uuidv7 } from '../lib/ids.js';
import { openSqliteHandle, openStore, type Store, StoreUnavailableError } from '../storage/db.js';
import { isUniqueViolation } from '../storage/errors.js';
import type { OrgBatch, WriteItem } from './model.js';
import { argumentHash, receiptPayload } from './receipt.js';
import { PostgresBatchStore } from './store-postgres.js';
import { NoWaitSqliteBatchStore } from './store-sqlite.js';
import { ThreadBatchStore } from './store-thread.js';
import { DecisionWriter } from './writer.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// No checkpoint timer: its pass writes on the app's own connection, which waits (on the event loop,
// up to the busy timeout) for a write lock that a test below holds on purpose. The approval sweeper,
// which does the same, is stopped in that test's suite.
const t = useTestApp({ checkpointIntervalMs: 0 });

function item(org: string, n: number): WriteItem {
  return {
    receipt: {
      organization_id: org,
      project_id: null,
      decision_id: null,
      decision: 'allow',
      mode: 'deterministic',
      tool_name: `tool-${n}`,
      argument_hash: argumentHash({ n }),
      policy_version: null,
      policy_hash: null,
      reason: 'test',
      timestamp: new Date().toISOString(),
    },
  };
}

async function chainOf(org: string) {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select(['payload', 'sequence'])
    .where('organization_id', '=', org)
    .orderBy('sequence')
    .execute();
  return rows.map((r) => r.payload);
}

/** Blocks the event loop until the writer thread raises its answer flag, or 10 s passed; whether it did. */
function awaitAnsweredFlag(answered: Int32Array): boolean {
  const until = Date.now() + 10_000;
  while (Atomics.load(answered, 0) === 0 && Date.now() < until);
  return Atomics.load(answered, 0) === 1;
}

/** Runs the microtasks queued so far (and those they queue), never the event loop's tasks. */
async function microtasks(): Promise<void> {
  for (let i = 0; i < 100; i++) await null;
}

/**
 * Lowers the answer flag once the thread has raised it for the answer the caller already has: the
 * thread raises it just after posting, so it can still be down when that answer is delivered.
 */
function lowerAnsweredFlag(answered: Int32Array): void {
  if (!awaitAnsweredFlag(answered)) throw new Error('the thread raised no answer flag in 10 s');
  Atomics.store(answered, 0, 0);
}

// The embedded store also commits through a worker thread (SVC_WRITER_THREAD); PostgreSQL never does.
describe.each(TEST_PG_URL ? [false] : [false, true])('DecisionWriter (thread: %s)', (thread) => {
  it('commits concurrent writes in batches and resolves each with its own receipt', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { thread });
    const receipts = await Promise.all(Array.from({ length: 300 }, (_, i) => writer.write(item(orgId, i))));
    await writer.close();
    expect(new Set(receipts.map((r) => r.sequence)).size).toBe(300);
    for (const [i, r] of receipts.entries()) expect(r.tool_name).toBe(`tool-${i}`);
    const report = await verifyReceipts(await chainOf(orgId));
    expect(report.ok).toBe(true);
    expect(report.count).toBe(300);
  });

  it('resolves each write with the receipt it stored, and stores its decision row and session counter', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { thread });
    const at = new Date().toISOString();
    const items = Array.from({ length: 40 }, (_, i): WriteItem => {
      const d = decisionItem({
        organizationId: orgId,
        toolName: i % 3 === 0 ? 'pay' : `tool-${i}`,
        decision: i % 4 === 0 ? 'deny' : 'allow',
        // Control characters, quotes and non-ASCII travel to the thread and back unchanged (no U+0000:
        // a PostgreSQL text column cannot hold it, and no request can carry it).
        reason: `reason ${i} \u0001\n "q" é`,
        at,
      });
      return {
        receipt: {
          ...d.receipt,
          ...(i % 2 === 0
            ? { client_id: `c-${i}\ud800`, upstream_id: 'u', result_hash: argumentHash({ i }) }
            : {}),
          ...(i % 5 === 0 ? { amount_micros: i * 1000, payer: 'p' } : {}),
          approval_id: i % 7 === 0 ? `a-${i}` : undefined,
        },
        decision: { ...d.decision!, latency_ms: i + 0.25, validations: i % 4 === 0 ? '[]' : null },
        ...(i % 3 === 0
          ? {
              session: {
                organization_id: orgId,
                session_id: 's',
                tool_name: 'pay',
                // Out of order within the batch: the furthest is kept, not the last.
                calls: (i * 7) % 40,
                cumulative: JSON.stringify({ amount: (i * 7) % 40 }),
                updated_at: at,
              },
            }
          : {}),
      };
    });
    const receipts = await Promise.all(items.map((it) => writer.write(it)));
    await writer.close();
    const stored = new Map(
      (
        await t.store.db
          .selectFrom('receipts')
          .select(['receipt_id', 'payload'])
          .where('organization_id', '=', orgId)
          .execute()
      ).map((r) => [r.receipt_id, r.payload]),
    );
    for (const r of receipts) {
      expect(receiptPayload(r)).toBe(stored.get(r.receipt_id));
      expect(r).toStrictEqual(JSON.parse(stored.get(r.receipt_id)!));
    }
    expect(receipts[2]!.client_id).toBe('c-2\ud800');
    expect(receipts[8]).not.toHaveProperty('approval_id');
    expect(receipts[14]!.approval_id).toBe('a-14');
    const rows = await t.store.db
      .selectFrom('decisions')
      .select(['id', 'reason', 'latency_ms', 'validations', 'receipt_id', 'receipt_hash', 'merkle_root'])
      .where('organization_id', '=', orgId)
      .execute();
    expect(rows).toHaveLength(40);
    for (const [i, it] of items.entries()) {
      const row = rows.find((r) => r.id === it.decision!.id)!;
      expect(row).toMatchObject({
        reason: it.decision!.reason,
        latency_ms: i + 0.25,
        validations: it.decision!.validations,
        receipt_id: receipts[i]!.receipt_id,
        receipt_hash: receipts[i]!.receipt_hash,
        merkle_root: receipts[i]!.merkle_root,
      });
    }
    const counter = await t.store.db
      .selectFrom('session_counters')
      .select(['calls', 'cumulative'])
      .where('organization_id', '=', orgId)
      .executeTakeFirstOrThrow();
    expect(counter).toEqual({ calls: 33, cumulative: '{"amount":33}' });
    expect((await verifyReceipts(await chainOf(orgId))).ok).toBe(true);
  });

  it('resolves each write of a batch of several organizations with its own receipt', async () => {
    const orgs = [
      (await createTenant(t)).orgId,
      (await createTenant(t)).orgId,
      (await createTenant(t)).orgId,
    ];
    const writer = new DecisionWriter(t.store, { thread });
    const receipts = await Promise.all(
      Array.from({ length: 60 }, (_, i) => writer.write(item(orgs[(i * 5) % 3]!, i))),
    );
    await writer.close();
    for (const [i, r] of receipts.entries()) {
      expect(r.organization_id).toBe(orgs[(i * 5) % 3]);
      expect(r.tool_name).toBe(`tool-${i}`);
    }
    for (const org of orgs) {
      const chain = await chainOf(org);
      expect(chain.map((p) => JSON.parse(p).receipt_id)).toEqual(
        receipts.filter((r) => r.organization_id === org).map((r) => r.receipt_id),
      );
      expect((await verifyReceipts(chain)).ok).toBe(true);
    }
  });

  it('never forks the chain with two writers (two processes) on one database', async () => {
    const { orgId } = await createTenant(t);
    const second: Store = openStore(t.database.url);
    const w1 = new DecisionWriter(t.store, { maxBatch: 7, thread });
    const w2 = new DecisionWriter(second, { maxBatch: 5, thread });
    try {
      const writes: Promise<unknown>[] = [];
      for (let round = 0; round < 20; round++) {
        for (let i = 0; i < 5; i++)
          writes.push(w1.write(item(orgId, round * 10 + i)), w2.write(item(orgId, round * 10 + 5 + i)));
        await new Promise((r) => setImmediate(r));
      }
      await Promise.all(writes);
    } finally {
      await w1.close();
      await w2.close();
      await second.close();
    }
    const chain = await chainOf(orgId);
    expect(chain).toHaveLength(200);
    const report = await verifyReceipts(chain);
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('rejects only the write that cannot commit; its batch neighbours are committed', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { thread });
    const good = writer.write(item(orgId, 1));
    const bad = writer.write({
      ...item(orgId, 2),
      receipt: { ...item(orgId, 2).receipt, argument_hash: 'not-a-hash' },
    });
    await expect(bad).rejects.toThrow();
    expect((await good).sequence).toBe(0);
    await writer.close();
    const chain = await chainOf(orgId);
    expect(chain).toHaveLength(1);
    expect((await verifyReceipts(chain)).ok).toBe(true);
  });

  it('commits writeAll all or nothing: a bad item fails its whole group, never its other neighbours', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { maxBatch: 2 });
    const alone = writer.write(item(orgId, 1));
    const bad = { ...item(orgId, 3), receipt: { ...item(orgId, 3).receipt, argument_hash: 'not-a-hash' } };
    // maxBatch 2 would cut the group after its first item; the batch is extended to keep it whole.
    const grouped = writer.writeAll([item(orgId, 2), bad, item(orgId, 4)]);
    const after = writer.write(item(orgId, 5));
    await expect(grouped).rejects.toThrow();
    expect((await alone).sequence).toBe(0);
    expect((await after).sequence).toBe(1);
    const okGroup = await writer.writeAll([item(orgId, 6), item(orgId, 7)]);
    expect(okGroup.map((r) => r.sequence)).toEqual([2, 3]);
    await writer.close();
    const chain = await chainOf(orgId);
    expect(chain.map((p) => JSON.parse(p).tool_name)).toEqual(['tool-1', 'tool-5', 'tool-6', 'tool-7']);
    expect((await verifyReceipts(chain)).ok).toBe(true);
  });

  it('fails only the group holding a decision id already recorded, as a unique violation; its neighbours commit', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { thread });
    // The batches the writer tries to commit, by size.
    const tried = vi.spyOn(writer as unknown as { commit: (batch: unknown[]) => Promise<unknown> }, 'commit');
    /** A decision with its row, under `id` when given (what two requests with one claim both write). */
    const decided = (n: number, id?: string): WriteItem => {
      const d = decisionItem({
        organizationId: orgId,
        toolName: `tool-${n}`,
        decision: 'allow',
        reason: 'test',
        at: new Date().toISOString(),
      });
      return id ? { receipt: { ...d.receipt, decision_id: id }, decision: { ...d.decision!, id } } : d;
    };
    const taken = uuidv7();
    await writer.writeAll([decided(1, taken)]);
    // One tick: one batch of six items, from four callers.
    const alone = writer.write(decided(2));
    const again = writer.writeAll([decided(3), decided(4, taken)]);
    const group = writer.writeAll([decided(5), decided(6)]);
    const after = writer.write(decided(7));
    const failure = await again.then(
      () => null,
      (err: unknown) => err,
    );
    expect(isUniqueViolation(failure)).toBe(true);
    await Promise.all([alone, group, after]);
    await writer.close();
    // The first decision alone, then the six in one batch: its transaction failed, and the writer
    // tried each caller's unit again alone (the failing group failed again; the others committed).
    expect(tried.mock.calls.map(([batch]) => batch.length)).toEqual([1, 6, 1, 2, 2, 1]);
    const chain = await chainOf(orgId);
    expect(chain.map((p) => JSON.parse(p).tool_name)).toEqual([
      'tool-1',
      'tool-2',
      'tool-5',
      'tool-6',
      'tool-7',
    ]);
    expect((await verifyReceipts(chain)).ok).toBe(true);
  });

  it('fails a whole batch at once while the store is not answering, without retrying each item', async () => {
    const { orgId } = await createTenant(t);
    const writer = new DecisionWriter(t.store, { thread });
    const batches = (writer as unknown as { batches: { commit: (...a: unknown[]) => Promise<unknown> } })
      .batches;
    const away = new StoreUnavailableError('the database did not answer');
    const commit = vi.spyOn(batches, 'commit').mockImplementation(async () => {
      await sleep(50);
      throw away;
    });
    // One tick: one batch of three.
    const writes = [1, 2, 3].map((n) => writer.write(item(orgId, n)));
    // Queued while that batch waits for the store: they fail with it, not after a wait of their own.
    await sleep(10);
    const queued = [4, 5].map((n) => writer.write(item(orgId, n)));
    for (const w of [...writes, ...queued]) await expect(w).rejects.toBe(away);
    // Retried one by one, the third would have waited for three more timeouts.
    expect(commit).toHaveBeenCalledTimes(1);
    commit.mockRestore();
    await writer.close();
  });

  it('refuses writes after close', async () => {
    const writer = new DecisionWriter(t.store, { thread });
    await writer.close();
    await expect(writer.write(item('x', 1))).rejects.toThrow(/closed/);
  });
});

describe.skipIf(!TEST_PG_URL)('PostgresBatchStore', () => {
  /** A decision of `tool-<n>`, with its decision row and session counter (n calls so far). */
  const decided = (org: string, n: number): WriteItem => {
    const at = new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString();
    return {
      ...decisionItem({ organizationId: org, toolName: `tool-${n}`, decision: 'allow', reason: 'test', at }),
      session: {
        organization_id: org,
        session_id: 's',
        tool_name: 'any',
        calls: n,
        cumulative: '{}',
        updated_at: at,
      },
    };
  };
  /** One organization's part of a batch. */
  const part = (org: string, ...ns: number[]): OrgBatch => ({
    organizationId: org,
    items: ns.map((n) => ({ item: decided(org, n), receiptId: uuidv7() })),
  });
  // In organization order, as the writer sends them.
  const batch = (...parts: OrgBatch[]) =>
    [...parts].sort((a, b) => (a.organizationId < b.organizationId ? -1 : 1));
  const names = async (org: string) => {
    const chain = await chainOf(org);
    const report = await verifyReceipts(chain);
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
    return chain.map((p) => JSON.parse(p).tool_name);
  };

  it('extends the head it wrote last with one statement, and takes the lock once another process moved it', async () => {
    const { orgId } = await createTenant(t);
    const second: Store = openStore(t.database.url);
    const mine = new PostgresBatchStore(t.store);
    const theirs = new PostgresBatchStore(second);
    const transactions = vi.spyOn(t.store.db, 'transaction');
    const sequences: number[] = [];
    const commit = async (store: PostgresBatchStore, n: number) => {
      for (const r of (await store.commit([part(orgId, n)])).values()) sequences.push(r.sequence);
    };
    try {
      await commit(mine, 1); // the head is not known yet: read under the lock
      expect(transactions).toHaveBeenCalledTimes(1);
      await commit(mine, 2); // the head it wrote: one statement, no transaction
      await commit(mine, 3);
      expect(transactions).toHaveBeenCalledTimes(1);
      await commit(theirs, 4); // another process moves the head
      await commit(mine, 5); // its statement finds the head moved, writes nothing, and the lock path runs
      expect(transactions).toHaveBeenCalledTimes(2);
      await commit(theirs, 6);
    } finally {
      transactions.mockRestore();
      await second.close();
    }
    expect(sequences).toEqual([0, 1, 2, 3, 4, 5]);
    expect(await names(orgId)).toEqual([1, 2, 3, 4, 5, 6].map((n) => `tool-${n}`));
  });

  it('locks only the heads it does not remember in a batch of several organizations, and those that moved', async () => {
    const a = (await createTenant(t)).orgId;
    const b = (await createTenant(t)).orgId;
    const second: Store = openStore(t.database.url);
    const mine = new PostgresBatchStore(t.store, { contendedMs: 0 });
    const theirs = new PostgresBatchStore(second);
    const locks = vi.spyOn(
      PostgresBatchStore.prototype as unknown as { lockHead: () => unknown },
      'lockHead',
    );
    const transactions = vi.spyOn(t.store.db, 'transaction');
    const moved = vi.spyOn(
      PostgresBatchStore.prototype as unknown as { moved: (org: string) => void },
      'moved',
    );
    try {
      await mine.commit(batch(part(a, 1)));
      await mine.commit(batch(part(b, 1)));
      expect(locks).toHaveBeenCalledTimes(2);
      await mine.commit(batch(part(a, 2), part(b, 2))); // both remembered
      expect(locks).toHaveBeenCalledTimes(2);
      await theirs.commit(batch(part(b, 3))); // another process moves b's head (and locks it)
      expect(locks).toHaveBeenCalledTimes(3);
      // b's statement finds its head moved and writes nothing; b's part runs again on its locked
      // head, in the same transaction.
      const receipts = await mine.commit(batch(part(a, 4, 5), part(b, 4)));
      expect(locks).toHaveBeenCalledTimes(4);
      expect(transactions).toHaveBeenCalledTimes(4);
      expect([...receipts.values()].map((r) => [r.tool_name, r.sequence]).sort()).toEqual([
        ['tool-4', 2],
        ['tool-4', 3],
        ['tool-5', 3],
      ]);
      // Both heads moved by another process: both found moved, both locked, in one transaction.
      await theirs.commit(batch(part(a, 6), part(b, 6)));
      moved.mockClear();
      await mine.commit(batch(part(a, 7), part(b, 7)));
      expect(moved.mock.calls.map(([org]) => org).sort()).toEqual([a, b].sort());
      expect(locks).toHaveBeenCalledTimes(8);
      expect(transactions).toHaveBeenCalledTimes(5);
    } finally {
      locks.mockRestore();
      transactions.mockRestore();
      moved.mockRestore();
      await second.close();
    }
    expect(await names(a)).toEqual(['tool-1', 'tool-2', 'tool-4', 'tool-5', 'tool-6', 'tool-7']);
    expect(await names(b)).toEqual(['tool-1', 'tool-2', 'tool-3', 'tool-4', 'tool-6', 'tool-7']);
    // Every decision row went in once, with its receipt, and the session counters are the last ones.
    for (const org of [a, b]) {
      const decisions = await t.store.db
        .selectFrom('decisions')
        .select('tool_name')
        .where('organization_id', '=', org)
        .orderBy('created_at')
        .execute();
      expect(decisions.map((d) => d.tool_name)).toEqual(await names(org));
      const counter = await t.store.db
        .selectFrom('session_counters')
        .select('calls')
        .where('organization_id', '=', org)
        .executeTakeFirstOrThrow();
      expect(counter.calls).toBe(7);
    }
  });

  it('locks the head of a chain another process extended for a while, instead of expecting it to be stale again', async () => {
    const { orgId } = await createTenant(t);
    const second: Store = openStore(t.database.url);
    const mine = new PostgresBatchStore(t.store, { contendedMs: 60_000 });
    const theirs = new PostgresBatchStore(second);
    const transactions = vi.spyOn(t.store.db, 'transaction');
    try {
      await mine.commit(batch(part(orgId, 1)));
      await mine.commit(batch(part(orgId, 2))); // remembered: no transaction
      expect(transactions).toHaveBeenCalledTimes(1);
      await theirs.commit(batch(part(orgId, 3)));
      await mine.commit(batch(part(orgId, 4))); // stale: locked
      await mine.commit(batch(part(orgId, 5))); // contended: locked again, no statement wasted first
      expect(transactions).toHaveBeenCalledTimes(3);
    } finally {
      transactions.mockRestore();
      await second.close();
    }
    expect(await names(orgId)).toEqual([1, 2, 3, 4, 5].map((n) => `tool-${n}`));
  });

  it('never forks or duplicates with two processes committing mixed batches at the same time', async () => {
    const a = (await createTenant(t)).orgId;
    const b = (await createTenant(t)).orgId;
    const second: Store = openStore(t.database.url);
    const stores = [new PostgresBatchStore(t.store, { contendedMs: 5 }), new PostgresBatchStore(second)];
    let n = 0;
    try {
      for (let round = 0; round < 40; round++) {
        // Each process commits one of: a alone, b alone, both; at the same moment as the other.
        await Promise.all(
          stores.map((store, i) => {
            const shape = (round + i) % 3;
            const parts = [];
            if (shape !== 1) parts.push(part(a, ++n));
            if (shape !== 0) parts.push(part(b, ++n));
            return store.commit(batch(...parts));
          }),
        );
      }
    } finally {
      await second.close();
    }
    const written = [...(await names(a)), ...(await names(b))];
    expect(written).toHaveLength(n);
    expect(new Set(written).size).toBe(n);
    const decisions = await t.store.db
      .selectFrom('decisions')
      .select('id')
      .where('organization_id', 'in', [a, b])
      .execute();
    expect(decisions).toHaveLength(n);
  });
});

describe.skipIf(TEST_PG_URL)('ThreadBatchStore', () => {
  it('fails a batch that cannot be sent to the thread, and stays usable without holding the process', async () => {
    const { orgId } = await createTenant(t);
    const store = new ThreadBatchStore(t.store.sqlitePath!);
    const inFlight = (store as unknown as { inFlight: Map<number, unknown> }).inFlight;
    const good = item(orgId, 1);
    // A function cannot be cloned to the thread: postMessage throws and nothing is sent.
    const bad = {
      ...good,
      decision: {
        ...decisionItem({
          organizationId: orgId,
          toolName: 'x',
          decision: 'allow',
          reason: 'r',
          at: good.receipt.timestamp,
        }).decision!,
        reason: (() => 'r') as unknown as string,
      },
    };
    const part = (it: WriteItem) => [{ organizationId: orgId, items: [{ item: it, receiptId: uuidv7() }] }];
    await expect(store.commit(part(bad))).rejects.toThrow(/could not be cloned/);
    expect(inFlight.size).toBe(0);
    const receipts = await store.commit(part(good));
    expect([...receipts.values()][0]!.tool_name).toBe('tool-1');
    expect(inFlight.size).toBe(0);
    await store.close();
  });

  /** The commit of one item of `orgId`: tool `tool-<n>`, under `receiptId`. */
  const lone = (orgId: string, n: number, receiptId = uuidv7()): OrgBatch[] => [
    { organizationId: orgId, items: [{ item: item(orgId, n), receiptId }] },
  ];

  /** Blocks the event loop, polling, until the store took an answer or 10 s passed; how many it took. */
  function pollUntilAnswered(store: ThreadBatchStore): number {
    const until = Date.now() + 10_000;
    let taken = store.poll();
    while (taken === 0 && Date.now() < until) taken = store.poll();
    return taken;
  }

  it('settles a commit the thread finished while the event loop is busy, without the event loop', async () => {
    const { orgId } = await createTenant(t);
    const store = new ThreadBatchStore(t.store.sqlitePath!);
    try {
      // The thread starts with the first commit; it is answered the usual way.
      await store.commit(lone(orgId, 1));
      expect(store.poll()).toBe(0);

      let settled: Map<string, unknown> | null = null;
      const pending = store.commit(lone(orgId, 2)).then((r) => {
        settled = r;
      });
      // Without a poll, only the event loop delivers the answer: microtasks alone never settle it.
      await microtasks();
      expect(settled).toBeNull();
      expect(pollUntilAnswered(store)).toBe(1);
      await microtasks();
      expect([...settled!.values()].map((r) => (r as { tool_name: string }).tool_name)).toEqual(['tool-2']);
      await pending;
      expect((await chainOf(orgId)).length).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('settles a commit the thread answered before its end was reported', async () => {
    const { orgId } = await createTenant(t);
    const store = new ThreadBatchStore(t.store.sqlitePath!);
    await store.commit(lone(orgId, 1));
    const worker = (store as unknown as { worker: Worker }).worker;
    const answered = (store as unknown as { answered: Int32Array }).answered;
    try {
      lowerAnsweredFlag(answered);
      let outcome = 'pending';
      const pending = store.commit(lone(orgId, 2)).then(
        () => {
          outcome = 'committed';
        },
        () => {
          outcome = 'failed';
        },
      );
      // The event loop stays blocked until the thread has posted its answer, which is therefore
      // not delivered yet when the thread's end is reported.
      expect(awaitAnsweredFlag(answered)).toBe(true);
      worker.emit('error', new Error('the thread died'));
      await microtasks();
      expect(outcome).toBe('committed');
      await pending;
      // The next commit starts another thread, on the same chain.
      const receipts = await store.commit(lone(orgId, 3));
      expect([...receipts.values()][0]!.sequence).toBe(2);
    } finally {
      await worker.terminate();
      await store.close();
    }
  });

  it('settles a commit that failed in the thread through a poll, as a rejection', async () => {
    const { orgId } = await createTenant(t);
    const store = new ThreadBatchStore(t.store.sqlitePath!);
    try {
      await store.commit(lone(orgId, 1));
      // A receipt id the chain already has: the thread's transaction fails and answers an error.
      const taken = uuidv7();
      await store.commit(lone(orgId, 2, taken));
      let failure: unknown = null;
      const pending = store.commit(lone(orgId, 3, taken)).catch((err: unknown) => {
        failure = err;
      });
      expect(pollUntilAnswered(store)).toBe(1);
      await microtasks();
      expect(String(failure)).toMatch(/UNIQUE/);
      await pending;
      expect((await chainOf(orgId)).length).toBe(2);
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(TEST_PG_URL)('DecisionWriter with the thread: answers taken when a decision arrives', () => {
  it('settles a commit the thread finished as soon as the next decision is written', async () => {
    const { orgId } = await createTenant(t);
    // No lone item on the event loop after the first batch: every batch goes to the thread.
    const writer = new DecisionWriter(t.store, { thread: true, inlineAfterIdleMs: Number.POSITIVE_INFINITY });
    const store = (writer as unknown as { batches: ThreadBatchStore }).batches;
    const inFlight = (store as unknown as { inFlight: Map<number, unknown> }).inFlight;
    try {
      // The thread starts with the first batch, on the event loop's time: not while it is blocked.
      // Two items: a lone first one would be committed on the event loop.
      await Promise.all([writer.write(item(orgId, 0)), writer.write(item(orgId, 1))]);
      const answered = (store as unknown as { answered: Int32Array }).answered;
      // Its answer came through the event loop, which leaves the flag up.
      lowerAnsweredFlag(answered);
      let first = false;
      const a = writer.write(item(orgId, 2)).then(() => {
        first = true;
      });
      while (inFlight.size === 0) await new Promise((r) => setImmediate(r));
      // Blocked until the thread has answered: only the writer can take the answer now.
      expect(awaitAnsweredFlag(answered)).toBe(true);
      expect(first).toBe(false);
      const b = writer.write(item(orgId, 3));
      await microtasks();
      expect(first).toBe(true);
      await Promise.all([a, b]);
      expect((await chainOf(orgId)).length).toBe(4);
    } finally {
      await writer.close();
    }
  });
});

describe.skipIf(TEST_PG_URL)('DecisionWriter with the thread: lone items after an idle spell', () => {
  beforeAll(() => t.ctx.approvals.stopSweeper());

  function recorder() {
    const on: string[] = [];
    return { on, metrics: { commitBatch: (_size: number, _s: number, where: string) => on.push(where) } };
  }

  it('commits lone items on the event loop and a burst in the thread, on one chain', async () => {
    const { orgId } = await createTenant(t);
    const { on, metrics } = recorder();
    // No pause after a slow commit here (a busy test machine's fsync can take more than 2 ms).
    const writer = new DecisionWriter(t.store, { thread: true, metrics, inlineMaxMs: Infinity });
    try {
      await writer.write(item(orgId, 0));
      await sleep(5);
      await writer.write(item(orgId, 1));
      await sleep(5);
      await Promise.all(Array.from({ length: 40 }, (_, i) => writer.write(item(orgId, 2 + i))));
      // The first lone item after a burst still goes to the thread, the next ones do not.
      await sleep(5);
      await writer.write(item(orgId, 42));
      await sleep(5);
      const last = await writer.write(item(orgId, 43));
      expect(last.sequence).toBe(43);
    } finally {
      await writer.close();
    }
    expect(on[0]).toBe('event_loop');
    expect(on[1]).toBe('event_loop');
    expect(on.slice(2, -1).every((w) => w === 'thread')).toBe(true);
    expect(on.slice(-2)).toEqual(['thread', 'event_loop']);
    const report = await verifyReceipts(await chainOf(orgId));
    expect(report.errors).toEqual([]);
    expect(report.count).toBe(44);
  });

  it('sends lone items to the thread while the writer is busy', async () => {
    const { orgId } = await createTenant(t);
    const { on, metrics } = recorder();
    // An idle spell of a minute never passes here: only the very first item finds the writer idle.
    const writer = new DecisionWriter(t.store, { thread: true, metrics, inlineAfterIdleMs: 60_000 });
    try {
      for (let i = 0; i < 5; i++) await writer.write(item(orgId, i));
    } finally {
      await writer.close();
    }
    expect(on).toEqual(['event_loop', 'thread', 'thread', 'thread', 'thread']);
    expect((await verifyReceipts(await chainOf(orgId))).ok).toBe(true);
  });

  it('hands a lone item to the thread when another connection holds the write lock, without blocking the loop', async () => {
    const { orgId } = await createTenant(t);
    const { on, metrics } = recorder();
    const writer = new DecisionWriter(t.store, { thread: true, metrics });
    const other = openSqliteHandle(t.store.sqlitePath!);
    let releasedAfter = 0;
    try {
      other.prepare('BEGIN IMMEDIATE').run();
      const started = performance.now();
      setTimeout(() => {
        releasedAfter = performance.now() - started;
        other.prepare('COMMIT').run();
      }, 150);
      const receipt = await writer.write(item(orgId, 0));
      expect(receipt.sequence).toBe(0);
    } finally {
      other.close();
      await writer.close();
    }
    expect(on).toEqual(['thread']);
    // The timer that releases the lock ran on time: the event loop did not wait out the busy
    // timeout (5 s) while the thread waited for the lock.
    expect(releasedAfter).toBeGreaterThan(0);
    expect(releasedAfter).toBeLessThan(2000);
    expect((await verifyReceipts(await chainOf(orgId))).ok).toBe(true);
  });

  /**
   * Runs `body` with a writer whose commits on the event loop count as slow above 150 ms (far above
   * what a busy test machine's fsync takes) and pause that path for `pauseMs`; while `slow.extraMs`
   * is above 0 each such commit takes that much longer (a slow disk, a stall). Returns where each
   * batch was committed.
   */
  async function withSlowInline(
    pauseMs: number,
    body: (writer: DecisionWriter, slow: { extraMs: number }) => Promise<void>,
  ): Promise<string[]> {
    const { on, metrics } = recorder();
    const slow = { extraMs: 0 };
    const real = NoWaitSqliteBatchStore.prototype.commit;
    const spy = vi.spyOn(NoWaitSqliteBatchStore.prototype, 'commit').mockImplementation(async function (
      this: NoWaitSqliteBatchStore,
      batches,
    ) {
      const receipts = await real.call(this, batches);
      if (slow.extraMs > 0) await sleep(slow.extraMs);
      return receipts;
    });
    try {
      const writer = new DecisionWriter(t.store, {
        thread: true,
        metrics,
        // Well above what a real commit takes on a busy machine: only the added delays count as slow.
        inlineMaxMs: 400,
        inlinePauseMs: pauseMs,
      });
      try {
        await body(writer, slow);
      } finally {
        await writer.close();
      }
    } finally {
      spy.mockRestore();
    }
    return on;
  }

  it('sends batches to the thread for a while once commits on the event loop are slow, and judges the disk anew after', async () => {
    const { orgId } = await createTenant(t);
    const on = await withSlowInline(300, async (writer, slow) => {
      let n = 0;
      const lone = async () => {
        await writer.write(item(orgId, n++));
        await sleep(5);
      };
      // The first opens the connection: its time is not held against the disk.
      await lone();
      // A commit counts for at most 800 ms in the moving average (each new one weighing 1/5), so
      // four slow ones in a row lift it over 400 ms: 160, 288, 390.4, 472.3.
      slow.extraMs = 900;
      for (let i = 0; i < 4; i++) await lone();
      // Paused: to the thread.
      await lone();
      await sleep(350);
      // After the pause one slow commit alone pauses the path again.
      await lone();
      await lone();
      slow.extraMs = 0;
      await sleep(350);
      // And one fast commit alone reopens it: the slow average that started the pause is gone.
      await lone();
      await lone();
      await lone();
    });
    expect(on).toEqual([
      ...Array(5).fill('event_loop'),
      'thread',
      'event_loop',
      'thread',
      'event_loop',
      'event_loop',
      'event_loop',
    ]);
    expect((await verifyReceipts(await chainOf(orgId))).ok).toBe(true);
  });

  it('does not pause the event loop path for one slow commit among fast ones', async () => {
    const { orgId } = await createTenant(t);
    const on = await withSlowInline(60_000, async (writer, slow) => {
      for (let i = 0; i < 6; i++) {
        // The fourth takes 2.5 s: counted as 800 ms, it lifts the average to about 160 ms, not 500.
        slow.extraMs = i === 3 ? 2500 : 0;
        await writer.write(item(orgId, i));
        await sleep(5);
      }
    });
    expect(on).toEqual(Array(6).fill('event_loop'));
  });

  it('has the thread checkpoint the WAL for the commits made on the event loop', async () => {
    const { orgId } = await createTenant(t);
    const { on, metrics } = recorder();
    const checkpoints: Promise<void>[] = [];
    const real = ThreadBatchStore.prototype.checkpoint;
    const spy = vi.spyOn(ThreadBatchStore.prototype, 'checkpoint').mockImplementation(function (
      this: ThreadBatchStore,
    ) {
      const done = real.call(this);
      checkpoints.push(done);
      return done;
    });
    const path = t.store.sqlitePath!;
    // Whatever the app's connection wrote so far is in the database file, not in the WAL.
    const direct = openSqliteHandle(path);
    direct.pragma('wal_checkpoint(TRUNCATE)');
    direct.close();
    const before = statSync(path).size;
    const writer = new DecisionWriter(t.store, {
      thread: true,
      metrics,
      inlineMaxMs: Infinity,
      inlineCheckpointEvery: 20,
    });
    try {
      for (let i = 0; i < 45; i++) {
        await writer.write(item(orgId, i));
        await sleep(2);
      }
      await Promise.all(checkpoints);
    } finally {
      await writer.close();
      spy.mockRestore();
    }
    expect(on.every((w) => w === 'event_loop')).toBe(true);
    expect(checkpoints).toHaveLength(2);
    // The event loop's connection never checkpoints: only the thread's moved these pages.
    expect(statSync(path).size).toBeGreaterThan(before);
  });

  it('never forks the chain when one process commits lone items on its event loop and another bursts', async () => {
    const { orgId } = await createTenant(t);
    const second: Store = openStore(t.database.url);
    const lone = recorder();
    const w1 = new DecisionWriter(t.store, { thread: true, metrics: lone.metrics });
    const w2 = new DecisionWriter(second, { thread: true });
    try {
      const writes: Promise<unknown>[] = [];
      for (let round = 0; round < 30; round++) {
        const mine = w1.write(item(orgId, round * 10));
        writes.push(mine);
        for (let i = 1; i < 6; i++) writes.push(w2.write(item(orgId, round * 10 + i)));
        // w1's next item is alone again; while w2's thread holds the write lock it goes to w1's thread.
        await mine;
        await sleep(3);
      }
      await Promise.all(writes);
    } finally {
      await w1.close();
      await w2.close();
      await second.close();
    }
    // The first commit is on the event loop whatever follows; later rounds, between the other
    // process's bursts, commit there too.
    expect(lone.on).toHaveLength(30);
    expect(lone.on.slice(1)).toContain('event_loop');
    const chain = await chainOf(orgId);
    expect(chain).toHaveLength(180);
    const report = await verifyReceipts(chain);
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
  });
});
