/**
 * npm run bench — every benchmark in one run, each printing its command, figures and verdict.
 * BENCH_DURATION (seconds per measured phase, default 10) and BENCH_RATE (default 5000) tune it;
 * BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/test; `none` skips) the PostgreSQL phase;
 * BENCH_ONLY (comma list of engine, validate, postgres, gateway, economic, payments, startup, sdk) runs a subset.
 * BENCH_GATEWAY_CALLS (calls per path of the gateway bench, default 3000) tunes the gateway phase.
 */

import { diskCommitLatency } from './disk.js';
import { runEconomicBench } from './economic.js';
import { runEngineBench } from './engine.js';
import { runGatewayBench } from './gateway.js';
import { runPaymentsBench } from './payments.js';
import { runPostgresBench } from './postgres.js';
import { runSdkBench } from './sdk.js';
import { runStartupBench } from './startup.js';
import { runValidateBench } from './validate.js';

const durationS = Number(process.env.BENCH_DURATION ?? 10);
const rate = Number(process.env.BENCH_RATE ?? 5000);
const pgUrl = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const only = process.env.BENCH_ONLY?.split(',');
const runs = (name: string) => !only || only.includes(name);
const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');

console.log(`# npm run bench  (BENCH_DURATION=${durationS} BENCH_RATE=${rate}, node ${process.version})`);

if (runs('engine')) {
  console.log('\n## policy engine (node --import tsx bench/engine.ts)');
  const engine = await runEngineBench();
  console.log(
    `${verdict(engine.allowPerSec >= 1_000_000)} engine: ${Math.round(engine.allowPerSec).toLocaleString('en-US')} evaluations/s allow path (goal >= 1,000,000)`,
  );
}

let baselineRps = 0;
if (runs('validate') || runs('postgres')) {
  // Durability costs one fsync per batch: how long one takes on this disk right now bounds the rate.
  const disk = await diskCommitLatency();
  console.log(
    `\ndisk: a one-row SQLite commit with fsync takes p50 ${disk.p50.toFixed(2)} ms, p99 ${disk.p99.toFixed(2)} ms right now`,
  );
  console.log(
    '\n## POST /v1/tools/validate vs bare node:http (autocannon, 32 connections; then a steady rate, bench/steady.ts)',
  );
  const v = await runValidateBench({ durationS, rate, port: 18480 });
  baselineRps = v.baselineRps;
  if (runs('validate')) {
    console.log(
      `${verdict(v.ratio >= 0.35)} throughput ratio ${v.ratio.toFixed(2)} (goal >= 0.35, stretch 0.50)`,
    );
    // Failed requests have no latency: the p99 holds only if every request at the rate was answered.
    console.log(
      `${verdict(v.p99AtRate <= 10 && v.failedAtRate === 0)} p99 ${v.p99AtRate} ms at ${rate} req/s (goal <= 10 ms), ${v.failedAtRate} failed or not 2xx`,
    );
    console.log(
      `${verdict(v.recorded >= v.answered)} durability: ${v.answered} answered, ${v.recorded} recorded`,
    );
  }
}

if (runs('postgres') && pgUrl !== 'none') {
  console.log(
    '\n## POST /v1/tools/validate on PostgreSQL, one and two instances (autocannon, 32 connections)',
  );
  const p = await runPostgresBench({ pgUrl, durationS, port: 18500, baselineRps });
  console.log(`${verdict(p.ratio >= 0.2)} PostgreSQL throughput ratio ${p.ratio.toFixed(2)} (goal >= 0.20)`);
  console.log(
    `${verdict(p.twoRps > p.oneRps)} two instances ${Math.round(p.twoRps)} req/s vs one ${Math.round(p.oneRps)} req/s (goal: more)`,
  );
  console.log(
    `${verdict(p.recorded >= p.answered)} durability: ${p.answered} answered, ${p.recorded} recorded`,
  );
}

if (runs('gateway')) {
  console.log(
    '\n## MCP gateway: tools/call echo to server-everything, through the gateway vs straight (one in flight)',
  );
  // One call in flight: each call's commit follows a wait for the upstream, on an idle disk.
  const idle = await diskCommitLatency(200, 4);
  console.log(
    `disk: a one-row SQLite commit with fsync after 4 ms idle takes p50 ${idle.p50.toFixed(2)} ms, p99 ${idle.p99.toFixed(2)} ms right now`,
  );
  const g = await runGatewayBench({ calls: Number(process.env.BENCH_GATEWAY_CALLS ?? 3000), port: 18490 });
  console.log(`${verdict(g.addedP50 <= 1)} added latency p50 ${g.addedP50} ms (goal <= 1 ms)`);
  console.log(`${verdict(g.addedP99 <= 5)} added latency p99 ${g.addedP99} ms (goal <= 5 ms)`);
  // The floor: what the extra hop alone adds, measured by a bare proxy in the same run.
  console.log(`floor: a bare pass-through proxy adds p50 ${g.hopP50} ms, p99 ${g.hopP99} ms`);
  console.log(
    `${verdict(g.recorded >= g.answered)} durability: ${g.answered} answered, ${g.recorded} recorded`,
  );
}

if (runs('economic')) {
  console.log(
    '\n## economic: authorize + commit pairs on the embedded store (node --import tsx bench/economic.ts)',
  );
  const e = await runEconomicBench({ durationS, port: 18510 });
  console.log(
    `${verdict(e.failed === 0 && e.spentUsd === e.expectedSpentUsd)} ledger exact: ${e.answered} pairs measured, ${e.failed} failed, spent equals the committed actuals`,
  );
}

if (runs('payments')) {
  console.log(
    '\n## payment gateway: mint + consume pairs on the embedded store (node --conditions=@svc/source --import tsx bench/payments.ts)',
  );
  const p = await runPaymentsBench({ durationS, port: 18530 });
  console.log(
    `${verdict(p.failed === 0 && p.recorded === p.consumed)} store whole: ${p.answered} pairs measured, ${p.failed} failed, ${p.recorded} of ${p.consumed} consumed capsules with ledger entry and receipt`,
  );
}

if (runs('startup')) {
  console.log('\n## svc serve start-up: compiled build vs TypeScript through tsx (median of 7 starts)');
  for (const [mode, f] of Object.entries(await runStartupBench(7, 18470))) {
    console.log(
      `${mode}: ready in ${f.readyMs.toFixed(0)} ms, CPU ${f.cpuMs.toFixed(0)} ms, RSS ${f.rssMiB.toFixed(1)} MiB`,
    );
  }
}

if (runs('sdk')) {
  console.log(
    '\n## SDK: local validate (cached policy, one core) vs a server round trip (node --conditions=@svc/source --import tsx bench/sdk.ts)',
  );
  const sdk = await runSdkBench({ rounds: 5, callsPerRound: 200_000, port: 18520 });
  console.log(
    `${verdict(sdk.localPerSec >= 500_000)} local validate ${Math.round(sdk.localPerSec).toLocaleString('en-US')} calls/s, p99 ${sdk.localP99Us.toFixed(2)} µs (goal >= 500,000/s)`,
  );
}
// An SDK client still holds the local decisions its log has not sent: the bench ends here.
process.exit(0);
