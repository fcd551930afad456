/**
 * The SDK's local decisions against a server round trip, in one run: `validate` calls per second
 * and their latency on one core (the bench process is one JS thread), from a cached deterministic
 * policy, with every decision held for the background log (log.maxBuffered is raised to hold the
 * whole run: the service records ~1,000 client decisions/s per key, so at the default 100,000 the
 * later calls would be decided by the service, which is the documented behaviour, not this
 * measurement); then the same calls with a fresh arguments object per call, as an agent makes them;
 * then the same calls sent to the service (`localValidation: false`), one at a time.
 *   npm run build && node --conditions=@svc/source --import tsx bench/sdk.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compilePolicy, evaluate } from '@svc/policy-engine';
import { createClient } from '@svc/sdk';
import { BENCH_POLICY } from './engine.js';
import { fmt, serviceEnv, startChild } from './lib.js';
import { provision } from './validate.js';

const ROOT = join(import.meta.dirname, '..');

export interface SdkBenchResult {
  /** The policy engine alone over the same calls, same loop: what this machine gives right now. */
  enginePerSec: number;
  localPerSec: number;
  localP50Us: number;
  localP99Us: number;
  /** Local rounds with a new arguments object per call (retained by the log until it is sent). */
  freshArgsPerSec: number;
  serverPerSec: number;
  serverP50Ms: number;
  serverP99Ms: number;
  lines: string[];
}

const CALLS = [
  { currency: 'USD', amount: 250, account: 'acct_1a2b3c4d' },
  { currency: 'EUR', amount: 999, account: 'acct_9f8e7d6c' },
  { currency: 'JPY', amount: 5000, account: 'nope' },
];

const quantile = (sorted: Float64Array, q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

export async function runSdkBench(opts: {
  rounds: number;
  callsPerRound: number;
  port: number;
}): Promise<SdkBenchResult> {
  const lines: string[] = [];
  const log = (s: string) => {
    lines.push(s);
    console.log(s);
  };
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-sdk-'));
  const base = `http://127.0.0.1:${opts.port}`;
  const svc = await startChild(
    'node',
    [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
    serviceEnv(opts.port, `sqlite:${join(dir, 'svc.db')}`),
    `${base}/readyz`,
  );
  try {
    const apiKey = await provision(base);
    let connected!: () => void;
    const up = new Promise<void>((r) => {
      connected = r;
    });
    const total = opts.rounds * opts.callsPerRound * 2 + Math.min(opts.callsPerRound, 200_000) + 10;
    const client = createClient({
      apiKey,
      baseUrl: base,
      onStreamChange: (c) => c && connected(),
      // The default records arguments as JSON at the call; BENCH_SDK_SNAPSHOT=false measures references.
      log: { maxBuffered: total, snapshot: process.env.BENCH_SDK_SNAPSHOT !== 'false' },
    });
    await up;
    const first = await client.validate('transfer', CALLS[0]!);
    if (first.source !== 'local') throw new Error('the policy was not cached');

    // Throughput: rounds of sequential awaited calls; the median round counts.
    const rates: number[] = [];
    for (let r = 0; r < opts.rounds; r++) {
      const started = performance.now();
      for (let i = 0; i < opts.callsPerRound; i++) {
        const res = await client.validate('transfer', CALLS[i % 3]!);
        if (res.source !== 'local') throw new Error('a call left the local path');
      }
      rates.push(opts.callsPerRound / ((performance.now() - started) / 1000));
    }
    rates.sort((a, b) => a - b);
    const localPerSec = rates[Math.floor(rates.length / 2)]!;
    const compiled = compilePolicy(BENCH_POLICY);
    const engineRates: number[] = [];
    for (let r = 0; r < 3; r++) {
      const started = performance.now();
      for (let i = 0; i < opts.callsPerRound; i++) evaluate(compiled, CALLS[i % 3]!);
      engineRates.push(opts.callsPerRound / ((performance.now() - started) / 1000));
    }
    const enginePerSec = engineRates.sort((a, b) => a - b)[1]!;

    // The same rounds with a new arguments object per call.
    const freshRates: number[] = [];
    for (let r = 0; r < opts.rounds; r++) {
      const started = performance.now();
      for (let i = 0; i < opts.callsPerRound; i++) {
        const c = CALLS[i % 3]!;
        const res = await client.validate('transfer', {
          currency: c.currency,
          amount: c.amount,
          account: c.account,
        });
        if (res.source !== 'local') throw new Error('a call left the local path');
      }
      freshRates.push(opts.callsPerRound / ((performance.now() - started) / 1000));
    }
    freshRates.sort((a, b) => a - b);
    const freshArgsPerSec = freshRates[Math.floor(freshRates.length / 2)]!;

    // Latency of single calls.
    const n = Math.min(opts.callsPerRound, 200_000);
    const samples = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await client.validate('transfer', CALLS[i % 3]!);
      samples[i] = (performance.now() - t0) * 1000;
    }
    samples.sort();
    const localP50Us = quantile(samples, 0.5);
    const localP99Us = quantile(samples, 0.99);
    log(
      `local validate          ${fmt(localPerSec)} calls/s (median of ${opts.rounds} rounds of ${fmt(opts.callsPerRound)}; ` +
        `rounds ${rates.map((x) => fmt(x)).join(', ')})  p50 ${localP50Us.toFixed(2)} µs  p99 ${localP99Us.toFixed(2)} µs`,
    );
    log(
      `local, fresh arguments  ${fmt(freshArgsPerSec)} calls/s (median of ${opts.rounds} rounds; a new arguments object per call)`,
    );

    // The same calls through the service.
    const remote = createClient({ apiKey, baseUrl: base, localValidation: false });
    const m = 2000;
    const rtt = new Float64Array(m);
    const started = performance.now();
    for (let i = 0; i < m; i++) {
      const t0 = performance.now();
      const res = await remote.validate('transfer', CALLS[i % 3]!);
      if (res.source !== 'server') throw new Error('expected a server decision');
      rtt[i] = performance.now() - t0;
    }
    const serverPerSec = m / ((performance.now() - started) / 1000);
    rtt.sort();
    const serverP50Ms = quantile(rtt, 0.5);
    const serverP99Ms = quantile(rtt, 0.99);
    log(
      `server round trip       ${fmt(serverPerSec)} calls/s (one caller, ${fmt(m)} calls)  p50 ${serverP50Ms.toFixed(2)} ms  p99 ${serverP99Ms.toFixed(2)} ms`,
    );
    log(
      `policy engine alone     ${fmt(enginePerSec)} evaluations/s (same calls, same loop: the machine right now)`,
    );
    log(`local / round trip      ${fmt(localPerSec / serverPerSec)}x the calls per second`);
    await remote.close();
    // The local decisions are still being logged (1,000/s per key at most: 500 per request, 120
    // requests a minute); the bench measures the decision path and stops here.

    return {
      enginePerSec,
      localPerSec,
      localP50Us,
      localP99Us,
      freshArgsPerSec,
      serverPerSec,
      serverP50Ms,
      serverP99Ms,
      lines,
    };
  } finally {
    await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log('# node --conditions=@svc/source --import tsx bench/sdk.ts');
  await runSdkBench({ rounds: 5, callsPerRound: 200_000, port: 18520 });
  process.exit(0);
}
