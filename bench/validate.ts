/**
 * POST /v1/tools/validate on the embedded store against a bare node:http baseline, in one run.
 * The service runs in a child process (as in production); the load generator runs here.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, fmt, load, provisionKey, serviceEnv, startChild } from './lib.js';
import { steadyLoad } from './steady.js';

const ROOT = join(import.meta.dirname, '..');

export interface ValidateBenchResult {
  baselineRps: number;
  validateRps: number;
  ratio: number;
  fixedRate: number;
  fixedRateAchieved: number;
  p50AtRate: number;
  p99AtRate: number;
  /** Requests of the steady phase that failed or were not answered 2xx. */
  failedAtRate: number;
  answered: number;
  recorded: number;
  lines: string[];
}

/** A key of a fresh enterprise organization and the 3-constraint policy every call is checked against. */
export async function provision(base: string, slug?: string): Promise<string> {
  const key = await provisionKey(base, slug);
  await api(base, '/v1/policies', {
    method: 'POST',
    headers: { 'x-service-api-key': key },
    body: {
      toolName: 'transfer',
      mode: 'deterministic',
      constraints: [
        { argumentName: 'currency', enabled: true, required: true, enum: ['USD', 'EUR', 'GBP'] },
        { argumentName: 'amount', enabled: true, minimum: 0, maximum: 1000 },
        { argumentName: 'account', enabled: true, regex: '^acct_[a-z0-9]{8}$' },
      ],
    },
  });
  return key;
}

export const BODIES = [
  {
    tool_name: 'transfer',
    arguments: { currency: 'USD', amount: 250, account: 'acct_1a2b3c4d' },
    context: { session_id: 'b' },
  },
  { tool_name: 'transfer', arguments: { currency: 'EUR', amount: 999, account: 'acct_9f8e7d6c' } },
  { tool_name: 'transfer', arguments: { currency: 'JPY', amount: 5000, account: 'nope' } },
].map((b) => JSON.stringify(b));

/** Seconds the steady phase runs at its rate before its measured window. */
const STEADY_WARMUP_S = 2;

export async function runValidateBench(opts: {
  durationS: number;
  rate: number;
  port: number;
}): Promise<ValidateBenchResult> {
  const lines: string[] = [];
  const log = (s: string) => {
    lines.push(s);
    console.log(s);
  };

  // Baseline.
  const basePort = opts.port + 1;
  const baseline = await startChild(
    'node',
    ['--import', 'tsx', join(ROOT, 'bench/baseline-server.ts')],
    { PORT: String(basePort) },
    `http://127.0.0.1:${basePort}/`,
  );
  const baseUrl = `http://127.0.0.1:${basePort}/v1/tools/validate`;
  let baselineRps = 0;
  try {
    await load({ url: baseUrl, connections: 32, durationS: 2, bodies: BODIES });
    const b = await load({ url: baseUrl, connections: 32, durationS: opts.durationS, bodies: BODIES });
    baselineRps = b.rps;
    log(`baseline node:http     ${fmt(b.rps)} req/s  p50 ${b.p50} ms  p99 ${b.p99} ms`);
  } finally {
    await baseline.stop();
  }

  // The service on a fresh embedded store.
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const svcBase = `http://127.0.0.1:${opts.port}`;
  const svc = await startChild(
    'node',
    [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
    serviceEnv(opts.port, `sqlite:${join(dir, 'svc.db')}`),
    `${svcBase}/readyz`,
  );
  try {
    const key = await provision(svcBase);
    const url = `${svcBase}/v1/tools/validate`;
    const headers = { 'x-service-api-key': key };
    let answered = 0;
    const warm = await load({ url, connections: 32, durationS: 3, headers, bodies: BODIES });
    answered += warm.ok;
    const v = await load({ url, connections: 32, durationS: opts.durationS, headers, bodies: BODIES });
    answered += v.ok;
    const ratio = v.rps / baselineRps;
    log(
      `validate (SQLite)      ${fmt(v.rps)} req/s  p50 ${v.p50} ms  p99 ${v.p99} ms  non-2xx ${v.non2xx}  errors ${v.errors}`,
    );
    log(`ratio validate/baseline ${ratio.toFixed(2)} (goal >= 0.35, stretch 0.50)`);

    // Open loop at a steady rate (bench/steady.ts): autocannon's overallRate sends each second's
    // share in a burst at the start of the second. The first seconds at the rate, on the same
    // connections, are a warm-up reported apart: the goal is about the steady state.
    const r = await steadyLoad({
      url,
      rate: opts.rate,
      durationS: opts.durationS,
      warmupS: STEADY_WARMUP_S,
      headers,
      bodies: BODIES,
    });
    answered += r.ok;
    log(
      `validate at ${fmt(opts.rate)} req/s steady (open loop): achieved ${fmt(r.rps)} req/s  p50 ${r.p50} ms  p99 ${r.p99} ms  p99.9 ${r.p999} ms  max ${r.max} ms (goal p99 <= 10 ms)  non-2xx ${r.non2xx}  errors ${r.errors}  connections lost ${r.lost}`,
    );
    log(
      `  the load generator's own lateness in sending, p99: ${r.sendLagP99} ms (counted in the latencies above)`,
    );
    log(
      `  the first ${STEADY_WARMUP_S} s at that rate, on the same connections (not counted above): p99 ${r.warmup?.p99} ms over ${fmt(r.warmup?.answered ?? 0)} requests`,
    );

    const listed = await api(svcBase, '/v1/decisions?limit=1', { headers });
    const recorded = listed.pagination.total as number;
    log(
      `answered 2xx ${fmt(answered)}, decisions in the log ${fmt(recorded)} (goal: every answered call recorded)`,
    );
    return {
      baselineRps,
      validateRps: v.rps,
      ratio,
      fixedRate: opts.rate,
      fixedRateAchieved: r.rps,
      p50AtRate: r.p50,
      p99AtRate: r.p99,
      failedAtRate: r.errors + r.non2xx,
      answered,
      recorded,
      lines,
    };
  } finally {
    await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
