/**
 * Payment-authorization gateway: POST /v1/gateway/capsules (mint) followed by
 * POST /v1/gateway/capsules/consume of that capsule, as an agent does around one payment, on the
 * embedded store. Closed loop: each worker runs one pair after the other. Afterwards every answered
 * consume must be in the store: its capsule consumed, its ledger entry posted and its receipt chained.
 * Run: node --conditions=@svc/source --import tsx bench/payments.ts (BENCH_DURATION, BENCH_WORKERS).
 */
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { signUserToken } from '../packages/server/src/lib/jwt.js';
import { api, fmt, provisionKey, SECRET } from './lib.js';
import {
  type PairBenchOptions,
  type PairLoopResult,
  postJson as post,
  runPairLoop,
  startSqliteService,
} from './pairs.js';

const ROOT = join(import.meta.dirname, '..');
const PAYEE = { name: 'Bench Supplies', account_number: 'DE89370400440532013000' };

export interface PaymentsBenchResult extends PairLoopResult {
  /** Consumed capsules with their ledger entry and receipt in the store after the run. */
  recorded: number;
  consumed: number;
}

export async function runPaymentsBench(opts: PairBenchOptions): Promise<PaymentsBenchResult> {
  const workers = opts.workers ?? 16;
  const { svc, dir, dbFile, base } = await startSqliteService(opts.port);
  let stopped = false;
  try {
    const key = { 'x-service-api-key': await provisionKey(base, 'bench-payments') };
    const token = await signUserToken(SECRET, 'bench-user', 3600, { jwtIssuer: null, jwtAudience: null });
    const orgs = await api(base, '/v1/organizations', { headers: { authorization: `Bearer ${token}` } });
    const org = (orgs.data ?? orgs)[0]._id as string;
    const user = { authorization: `Bearer ${token}`, 'x-organization-id': org };
    // A pack with every per-consume check on: rails, a condition, entity caps, quarantine (lifted).
    await api(base, '/v1/gateway/packs/bench', {
      method: 'PUT',
      headers: user,
      body: {
        allowed_rails: ['ach', 'usdc'],
        entity_caps: { usd_24h: '100000000', usd_7d: null, usd_30d: null },
        conditions: [{ name: 'small', expression: 'payment.amount <= 1000.0' }],
      },
    });
    const payee = await post(`${base}/v1/gateway/payees`, key, { details: PAYEE });
    await post(`${base}/v1/gateway/payees/${payee.id}/lift-quarantine`, user, {});
    const loop = await runPairLoop({
      workers,
      durationS: opts.durationS,
      pair: async (worker) => {
        const minted = await post(`${base}/v1/gateway/capsules`, key, {
          entity_id: `entity-${worker % 4}`,
          agent_id: `agent-${worker}`,
          pack_id: 'bench',
          rails: ['ach'],
          beneficiary: { payee_id: payee.id },
          amount_ceiling: { currency: 'USD', amount: '25.00' },
          ttl_seconds: 300,
        });
        const done = await post(`${base}/v1/gateway/capsules/consume`, key, {
          capsule: minted.capsule,
          amount: '12.50',
          currency: 'USD',
          rail: 'ach',
          beneficiary: PAYEE,
        });
        if (done.status !== 'consumed' || typeof done.receipt_id !== 'string')
          throw new Error(`not consumed: ${JSON.stringify(done)}`);
      },
    });
    await svc.stop();
    stopped = true;
    // Every consume answered (warm-up included) must be in the store, whole.
    const Database = createRequire(join(ROOT, 'packages/server/package.json'))('better-sqlite3');
    const db = new Database(dbFile, { readonly: true });
    const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    const consumed = count("select count(*) as n from gateway_capsules where status = 'consumed'");
    const recorded = count(
      `select count(*) as n from gateway_capsules c
         join spend_ledger l on l.organization_id = c.organization_id and l.action_id = 'capsule:' || c.id
         join receipts r on r.organization_id = c.organization_id and r.receipt_id = c.receipt_id
       where c.status = 'consumed'`,
    );
    db.close();
    const result: PaymentsBenchResult = { ...loop, recorded, consumed };
    console.log(
      `mint+consume (SQLite, ${workers} workers)  ${fmt(result.pairsPerSec)} pairs/s  pair p50 ${result.p50} ms  p99 ${result.p99} ms  failed ${result.failed}`,
    );
    console.log(
      `store: ${consumed} capsules consumed, ${recorded} of them with their ledger entry and receipt`,
    );
    return result;
  } finally {
    if (!stopped) await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runPaymentsBench({
    durationS: Number(process.env.BENCH_DURATION ?? 10),
    port: 18530,
    ...(process.env.BENCH_WORKERS ? { workers: Number(process.env.BENCH_WORKERS) } : {}),
  });
}
