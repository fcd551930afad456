/**
 * Spend authorization: POST /v1/economic/authorize followed by POST /v1/economic/commit for the same
 * action, as an agent does around a purchase, on the embedded store. Closed loop: each worker runs
 * one pair after the other. Afterwards the ledger must hold exactly what was answered.
 */
import { rmSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { signUserToken } from '../packages/server/src/lib/jwt.js';
import { api, fmt, provisionKey, SECRET } from './lib.js';
import {
  type PairBenchOptions,
  type PairLoopResult,
  postJson,
  runPairLoop,
  startSqliteService,
} from './pairs.js';

export interface EconomicBenchResult extends PairLoopResult {
  spentUsd: number;
  expectedSpentUsd: number;
}

const post = (url: string, key: string, body: unknown) => postJson(url, { 'x-service-api-key': key }, body);

export async function runEconomicBench(opts: PairBenchOptions): Promise<EconomicBenchResult> {
  const workers = opts.workers ?? 16;
  const { svc, dir, base } = await startSqliteService(opts.port);
  try {
    const key = await provisionKey(base);
    const token = await signUserToken(SECRET, 'bench-user', 3600, { jwtIssuer: null, jwtAudience: null });
    const orgs = await api(base, '/v1/organizations', { headers: { authorization: `Bearer ${token}` } });
    const org = (orgs.data ?? orgs)[0]._id as string;
    // The organization's configuration (a project's only tightens it), and the project's: every pair
    // is checked against session, agent and category budgets under both combined.
    const config = {
      approvedPayers: ['corp'],
      defaultPayer: 'corp',
      sessionLimitUsd: 1_000_000,
      agentLimitUsd: 100_000_000,
      categoryPolicies: { supplies: { limitUsd: 100_000_000 } },
    };
    await api(base, '/v1/economic/config', {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'x-organization-id': org },
      body: config,
    });
    await api(base, '/v1/economic/config', {
      method: 'PUT',
      headers: { 'x-service-api-key': key },
      body: config,
    });
    let seq = 0;
    let expectedMicros = 0;
    const loop = await runPairLoop({
      workers,
      durationS: opts.durationS,
      pair: async (worker) => {
        const n = ++seq;
        const action = {
          actionId: `a-${n}`,
          sessionId: `s-${worker}-${n % 50}`,
          agentId: `agent-${worker}`,
          toolName: 'buy_supplies',
          category: 'supplies',
          estimatedSpendUsd: 2.5,
        };
        const a = await post(`${base}/v1/economic/authorize`, key, action);
        if (a.decision !== 'allow') throw new Error(`not allowed: ${JSON.stringify(a)}`);
        await post(`${base}/v1/economic/commit`, key, {
          actionId: action.actionId,
          sessionId: action.sessionId,
          agentId: action.agentId,
          toolName: action.toolName,
          category: action.category,
          quotedSpendUsd: 2.5,
          actualSpendUsd: 2.25,
        });
        expectedMicros += 2_250_000;
      },
    });
    // The category budget spans every pair: its spent sum must equal what the commits answered.
    const status = await post(`${base}/v1/economic/status`, key, {
      sessionId: 'none',
      agentId: 'none',
      category: 'supplies',
    });
    const spentUsd = (status.budget as { category: { spentUsd: number } }).category.spentUsd;
    const result: EconomicBenchResult = { ...loop, spentUsd, expectedSpentUsd: expectedMicros / 1e6 };
    console.log(
      `authorize+commit (SQLite, ${workers} workers)  ${fmt(result.pairsPerSec)} pairs/s  pair p50 ${result.p50} ms  p99 ${result.p99} ms  failed ${result.failed}`,
    );
    console.log(
      `ledger: spent $${fmt(spentUsd, 2)} in the category, commits answered $${fmt(result.expectedSpentUsd, 2)}`,
    );
    return result;
  } finally {
    await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runEconomicBench({ durationS: Number(process.env.BENCH_DURATION ?? 10), port: 18500 });
}
