/**
 * The closed-loop harness of the two-request benches (authorize+commit, mint+consume): a JSON POST
 * that throws on an error answer, and workers that each run one pair after the other, first for a
 * warm-up and then measured.
 */

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Child, serviceEnv, startChild } from './lib.js';

const ROOT = join(import.meta.dirname, '..');

export interface PairBenchOptions {
  durationS: number;
  port: number;
  /** Concurrent closed loops; 16 unless given. */
  workers?: number;
}

/** The service on an embedded store (`dbFile`) in a new temporary folder `dir`, ready. */
export async function startSqliteService(
  port: number,
): Promise<{ svc: Child; dir: string; dbFile: string; base: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const dbFile = join(dir, 'svc.db');
  const base = `http://127.0.0.1:${port}`;
  const svc = await startChild(
    'node',
    [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
    serviceEnv(port, `sqlite:${dbFile}`),
    `${base}/readyz`,
  );
  return { svc, dir, dbFile, base };
}

/** POSTs `body` as JSON with `headers`; the parsed answer, or an error naming the status and body. */
export async function postJson(
  url: string,
  headers: Record<string, string>,
  body: unknown,
): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${url} → ${res.status} ${JSON.stringify(json)}`);
  return json;
}

export interface PairLoopResult {
  pairsPerSec: number;
  p50: number;
  p99: number;
  /** Pairs answered in the measured window. */
  answered: number;
  /** Pairs that threw, warm-up included. */
  failed: number;
}

/**
 * `workers` loops, each running `pair(worker)` one after the other: for `warmUpMs` unmeasured, then
 * for `durationS` seconds with each pair's latency taken. A pair that throws counts as failed (the
 * first few are printed).
 */
export async function runPairLoop(opts: {
  workers: number;
  durationS: number;
  pair: (worker: number) => Promise<void>;
  warmUpMs?: number;
}): Promise<PairLoopResult> {
  let answered = 0;
  let failed = 0;
  const latencies: number[] = [];
  const run = async (worker: number, until: number, measure: boolean) => {
    while (Date.now() < until) {
      const started = performance.now();
      try {
        await opts.pair(worker);
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
  const warmUntil = Date.now() + (opts.warmUpMs ?? 2000);
  await Promise.all(Array.from({ length: opts.workers }, (_, w) => run(w, warmUntil, false)));
  const started = Date.now();
  const until = started + opts.durationS * 1000;
  await Promise.all(Array.from({ length: opts.workers }, (_, w) => run(w, until, true)));
  const elapsed = (Date.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => Math.round((latencies[Math.floor((latencies.length - 1) * p)] ?? 0) * 10) / 10;
  return { pairsPerSec: answered / elapsed, p50: pct(0.5), p99: pct(0.99), answered, failed };
}
