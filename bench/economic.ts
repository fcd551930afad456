/**
 * Spend authorization: POST /v1/economic/authorize followed by POST /v1/economic/commit for the same
 * action, as an agent does around a purchase, on the embedded store. Closed loop: each worker runs
 * one pair after the other. Afterwards the ledger must hold exactly what was answered.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { api, fmt, provisionKey, serviceEnv, startChild } from './lib.js';

const ROOT = join(import.meta.dirname, '..');

export interface EconomicBenchResult {
  pairsPerSec: number;
  p50: number;
  p99: number;
  answered: number;
  failed: number;
  spentUsd: number;
  expectedSpentUsd: number;
}

async function post(url: string, key: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-service-api-key': key },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${url} → ${res.status} ${JSON.stringify(json)}`);
  return json;
}

export async function runEconomicBench(opts: {
  durationS: number;
  port: number;
  workers?: number;
}): Promise<EconomicBenchResult> {
  const workers = opts.workers ?? 16;
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const base = `http://127.0.0.1:${opts.port}`;
  const svc = await startChild(
    'node',
    [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
    serviceEnv(opts.port, `sqlite:${join(dir, 'svc.db')}`),
    `${base}/readyz`,
  );
  try {
    const key = await provisionKey(base);
    // A project configuration: every pair is checked against session, agent and category budgets.
    await api(base, '/v1/economic/config', {
      method: 'PUT',
      headers: { 'x-service-api-key': key },
      body: {
        approvedPayers: ['corp'],
        defaultPayer: 'corp',
        sessionLimitUsd: 1_000_000,
        agentLimitUsd: 100_000_000,
        categoryPolicies: { supplies: { limitUsd: 100_000_000 } },
      },
    });
    let seq = 0;
    let answered = 0;
    let failed = 0;
    let expectedMicros = 0;
    const latencies: number[] = [];
    const run = async (worker: number, until: number, measure: boolean) => {
      while (Date.now() < until) {
        const n = ++seq;
        const action = {
          actionId: `a-${n}`,
          sessionId: `s-${worker}-${n % 50}`,
          agentId: `agent-${worker}`,
          toolName: 'buy_supplies',
          category: 'supplies',
          estimatedSpendUsd: 2.5,
        };
        const started = performance.now();
        try {
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
          if (measure) {
            answered++;
            latencies.push(performance.now() - started);
          }
        } catch (err) {
          failed++;
          if (failed < 3) console.error(String(err));
        }
      }
    };
    const warmUntil = Date.now() + 2000;
    await Promise.all(Array.from({ length: workers }, (_, w) => run(w, warmUntil, false)));
    const started = Date.now();
    const until = started + opts.durationS * 1000;
    await Promise.all(Array.from({ length: workers }, (_, w) => run(w, until, true)));
    const elapsed = (Date.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    const pct = (p: number) => Math.round((latencies[Math.floor((latencies.length - 1) * p)] ?? 0) * 10) / 10;
    // The category budget spans every pair: its spent sum must equal what the commits answered.
    const status = await post(`${base}/v1/economic/status`, key, {
      sessionId: 'none',
      agentId: 'none',
      category: 'supplies',
    });
    const spentUsd = (status.budget as { category: { spentUsd: number } }).category.spentUsd;
    const result: EconomicBenchResult = {
      pairsPerSec: answered / elapsed,
      p50: pct(0.5),
      p99: pct(0.99),
      answered,
      failed,
      spentUsd,
      expectedSpentUsd: expectedMicros / 1e6,
    };
    console.log(
      `authorize+commit (SQLite, ${workers} workers)  ${fmt(result.pairsPerSec)} pairs/s  pair p50 ${result.p50} ms  p99 ${result.p99} ms  failed ${failed}`,
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
