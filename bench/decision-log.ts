/**
 * CPU cost of the decision log alone, per decision: node --conditions=@svc/source --import tsx bench/decision-log.ts
 * Builds the write item of a validate call (as the pipeline does), then commits batches of
 * LOG_BATCH (default 16) through the store's batch commit, and prints CPU µs per decision for each
 * stage. On SQLite it also measures the writer thread's part alone, in this thread: a batch read
 * from its structured clone (ledger/wire.ts), committed, and the answer cloned. LOG_DB=sqlite
 * (default, a file with synchronous=OFF so the figure is CPU, not fsync) or a postgres:// URL
 * (then client CPU only; the server's work is not in this process).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WriteItem } from '../packages/server/src/ledger/model.js';
import { appendReceipts, argumentHash, emptyChainHead } from '../packages/server/src/ledger/receipt.js';
import { DecisionWriter } from '../packages/server/src/ledger/writer.js';
import { uuidv7 } from '../packages/server/src/lib/ids.js';
import { openStore } from '../packages/server/src/storage/db.js';
import { migrateToLatest } from '../packages/server/src/storage/migrate.js';

const N = Number(process.env.LOG_DECISIONS ?? 40_000);
const BATCH = Number(process.env.LOG_BATCH ?? 16);
const url = process.env.LOG_DB ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'svc-log-')), 'svc.db')}`;

const store = openStore(url);
await migrateToLatest(store);
store.sqlite?.pragma('synchronous = OFF');
const org = uuidv7();
const now = new Date().toISOString();
await store.db
  .insertInto('organizations')
  .values({ id: org, name: 'b', slug: `b-${org}`, owner_id: 'u', tier: 'enterprise', created_at: now })
  .execute();

function item(): WriteItem {
  const id = uuidv7();
  const at = new Date().toISOString();
  const args = { currency: 'USD', amount: 250, account: 'acct_1a2b3c4d' };
  return {
    receipt: {
      organization_id: org,
      project_id: 'p-1',
      decision_id: id,
      decision: 'allow',
      mode: 'deterministic',
      tool_name: 'transfer',
      argument_hash: argumentHash(args),
      policy_version: 1,
      policy_hash: `sha256:${'a'.repeat(64)}`,
      reason: 'All constraints passed',
      timestamp: at,
    },
    decision: {
      id,
      organization_id: org,
      project_id: 'p-1',
      tool_name: 'transfer',
      arguments: JSON.stringify(args),
      context: '{"session_id":"b"}',
      decision: 'allow',
      mode: 'deterministic',
      reason: 'All constraints passed',
      failed_argument: null,
      matched_exception: null,
      validations: null,
      latency_ms: 0.1,
      source: 'validate',
      policy_version: 1,
      created_at: at,
    },
  };
}

function measure(name: string, fn: () => void | Promise<void>): Promise<void> {
  const t0 = process.cpuUsage();
  return Promise.resolve(fn()).then(() => {
    const d = process.cpuUsage(t0);
    console.log(`${name.padEnd(44)} ${((d.user + d.system) / N).toFixed(1).padStart(7)} µs CPU per decision`);
  });
}

// Warm up the JIT on a separate chain so both stages below run optimized code.
{
  const items = Array.from({ length: 2000 }, item);
  appendReceipts(
    emptyChainHead(),
    items.map((i) => ({ ...i.receipt, receipt_id: uuidv7() })),
  );
}

let items: WriteItem[] = [];
await measure('build write items (argument hash, rows)', () => {
  items = Array.from({ length: N }, item);
});
await measure('receipts only (appendReceipts)', () => {
  let head = emptyChainHead();
  for (let i = 0; i < N; i += BATCH) {
    head = appendReceipts(
      head,
      items.slice(i, i + BATCH).map((x) => ({ ...x.receipt, receipt_id: uuidv7() })),
    ).head;
  }
});
const writer = new DecisionWriter(store, { maxBatch: BATCH });
await measure(`DecisionWriter, batches of ${BATCH}, receipts + rows + commit`, async () => {
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < N; i++) {
    pending.push(writer.write(items[i]!));
    if (pending.length === BATCH * 8) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
});
await writer.close();

if (store.sqlite) {
  const { serialize, deserialize } = await import('node:v8');
  const { createSqliteCommit } = await import('../packages/server/src/ledger/store-sqlite.js');
  const { encodeBatches, encodeReceipts } = await import('../packages/server/src/ledger/wire.js');
  const commit = createSqliteCommit(store.sqlite);
  const messages: Buffer[] = [];
  for (let i = 0; i < N; i += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, N - i) }, () => ({
      item: item(),
      receiptId: uuidv7(),
    }));
    messages.push(serialize({ id: i, batches: encodeBatches([{ organizationId: org, items: batch }]) }));
  }
  await measure("the writer thread's part: clone in, commit, clone out", () => {
    for (const m of messages) {
      const msg = deserialize(m) as { id: number; batches: Parameters<typeof commit>[0] };
      serialize({ id: msg.id, receipts: encodeReceipts(commit(msg.batches).values()) });
    }
  });
}
await store.close();
