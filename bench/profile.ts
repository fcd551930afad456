/**
 * CPU profile of `svc serve` under the validate load: node --import tsx bench/profile.ts
 * PROFILE_DB=sqlite (default) or a postgres:// URL; PROFILE_SECONDS (default 10); PROFILE_RATE
 * (requests/s sent at a steady rate, open loop: bench/steady.ts; default: as fast as
 * PROFILE_CONNECTIONS autocannon connections go, 32 unless set); PROFILE_CPU_PROF=false to measure
 * without the profiler (whose own thread otherwise counts among the other threads). Writes the
 * .cpuprofile (open it in Chrome DevTools), prints self time by function and by area, and the
 * server process's CPU time (user + system) per answered request over the measured phase, in all,
 * on the main thread, on the busiest other thread (the decision writer's, when it runs) and per
 * commit batch, and the main thread's garbage collections during the phase (from /metrics): the
 * figures that compare code versions on a machine shared with others. With PROFILE_RATE it also
 * prints when the slowest 1 % of requests were due, in 100 ms windows, which shows whether the
 * tail comes in stalls. PROFILE_TARGET=baseline measures the bare node:http baseline
 * (bench/baseline-server.ts) instead; PROFILE_PATH=/v1/validate loads the validate route that
 * answers with the receipt.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type LoadResult, load, readMetrics, serviceEnv, startChild, statCpuMs } from './lib.js';
import { type SteadyResult, steadyLoad } from './steady.js';
import { BODIES, provision } from './validate.js';

const ROOT = join(import.meta.dirname, '..');
const seconds = Number(process.env.PROFILE_SECONDS ?? 10);
const dir = mkdtempSync(join(tmpdir(), 'svc-profile-'));
const db = process.env.PROFILE_DB ?? 'sqlite';
const dbUrl = db === 'sqlite' ? `sqlite:${join(dir, 'svc.db')}` : db;
const port = 18580;
const base = `http://127.0.0.1:${port}`;

const cpuProf = process.env.PROFILE_CPU_PROF !== 'false';
const rate = process.env.PROFILE_RATE ? Number(process.env.PROFILE_RATE) : undefined;
/** Connections of the flat-out load (PROFILE_CONNECTIONS, default 32 as in the validate bench). */
const connections = Number(process.env.PROFILE_CONNECTIONS ?? 32);
const baseline = process.env.PROFILE_TARGET === 'baseline';
const svc = await startChild(
  'node',
  [
    ...(cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : []),
    ...(baseline
      ? ['--import', 'tsx', join(ROOT, 'bench/baseline-server.ts')]
      : [join(ROOT, 'packages/server/bin/svc.js'), 'serve']),
  ],
  baseline ? { PORT: String(port) } : serviceEnv(port, dbUrl),
  baseline ? `${base}/` : `${base}/readyz`,
);

/** utime + stime of each thread of a process, in µs (Linux /proc). */
function threadMicros(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(Number(tid), statCpuMs(`/proc/${pid}/task/${tid}/stat`) * 1000);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return out;
}

/**
 * Commit batches, the decisions in them, the batches committed on the event loop, and the seconds
 * commits took (from the writer's hand-off to its answer) so far, from /metrics.
 */
async function batchCounters(): Promise<{
  batches: number;
  decisions: number;
  onLoop: number;
  seconds: number;
  /** The main thread's collections so far: count and seconds, by kind (major, minor, incremental). */
  gc: Map<string, { count: number; seconds: number }>;
  /** Bytes in use in the main thread's old space (what survives scavenges ends up there). */
  oldBytes: number;
} | null> {
  const value = await readMetrics(base);
  if (!value) return null;
  return {
    batches: value('svc_decision_commit_batch_size_count'),
    decisions: value('svc_decision_commit_batch_size_sum'),
    onLoop: value('svc_decision_commits_total\\{on="event_loop"\\}') || 0,
    seconds: value('svc_decision_commit_duration_seconds_sum'),
    gc: new Map(
      ['major', 'minor', 'incremental'].map((kind) => [
        kind,
        {
          count: value(`nodejs_gc_duration_seconds_count\\{kind="${kind}"\\}`) || 0,
          seconds: value(`nodejs_gc_duration_seconds_sum\\{kind="${kind}"\\}`) || 0,
        },
      ]),
    ),
    oldBytes: value('nodejs_heap_space_size_used_bytes\\{space="old"\\}'),
  };
}

let rps = 0;
try {
  const key = baseline ? '' : await provision(base);
  const opts = {
    url: `${base}${process.env.PROFILE_PATH ?? '/v1/tools/validate'}`,
    headers: { 'x-service-api-key': key },
    bodies: BODIES,
  };
  // A fixed rate is sent steadily (open loop, bench/steady.ts); otherwise `connections` go flat out.
  const phase = (durationS: number, record = false): Promise<LoadResult | SteadyResult> =>
    rate ? steadyLoad({ ...opts, rate, durationS, record }) : load({ ...opts, connections, durationS });
  await phase(2);
  const pid = svc.proc.pid!;
  const counters0 = baseline ? null : await batchCounters();
  const before = threadMicros(pid);
  const r = await phase(seconds, true);
  const steady = 'sendLagP99' in r ? r : null;
  const after = threadMicros(pid);
  const counters1 = baseline ? null : await batchCounters();
  rps = r.rps;
  const used = [...after].map(([tid, t]) => [tid, t - (before.get(tid) ?? 0)] as const);
  const cpu = used.reduce((a, [, t]) => a + t, 0);
  const main = used.find(([tid]) => tid === pid)?.[1] ?? 0; // the main thread's id is the process id
  const busiest = Math.max(0, ...used.filter(([tid]) => tid !== pid).map(([, t]) => t));
  const per = (t: number) => (t / Math.max(1, r.ok)).toFixed(1);
  console.log(
    `server CPU ${(cpu / 1e6).toFixed(2)} s for ${r.ok} answered (${r.non2xx} non-2xx): ${per(cpu)} µs per request` +
      ` (main thread ${per(main)}, busiest other thread ${per(busiest)}, the rest ${per(cpu - main - busiest)})` +
      `  (${rps.toFixed(0)} req/s, p50 ${r.p50} ms, p99 ${r.p99} ms)`,
  );
  if (counters0 && counters1) {
    const batches = counters1.batches - counters0.batches;
    const decisions = counters1.decisions - counters0.decisions;
    const perBatch = (t: number) => (t / Math.max(1, batches)).toFixed(0);
    const onLoop = counters1.onLoop - counters0.onLoop;
    console.log(
      `commit batches ${batches} (${onLoop} on the event loop), ${(decisions / Math.max(1, batches)).toFixed(1)} decisions each; per batch: ` +
        `${perBatch(cpu)} µs of CPU in all, main thread ${perBatch(main)}, busiest other thread ${perBatch(busiest)}; ` +
        `a commit took ${perBatch((counters1.seconds - counters0.seconds) * 1e6)} µs from hand-off to answer`,
    );
    const gc = [...counters1.gc].map(([kind, after]) => {
      const before = counters0.gc.get(kind) ?? { count: 0, seconds: 0 };
      return `${kind} ${after.count - before.count} (${((after.seconds - before.seconds) * 1000).toFixed(0)} ms)`;
    });
    // Without a major collection in the phase, the growth of the old space is what got promoted.
    const grew = ((counters1.oldBytes - counters0.oldBytes) / 1e6).toFixed(1);
    console.log(`main thread collections during the phase: ${gc.join(', ')}; old space grew ${grew} MB`);
  }
  if (steady?.trace) {
    const { due, latency } = steady.trace;
    console.log(
      `steady: p99.9 ${steady.p999} ms, max ${steady.max} ms, ${steady.errors} failed, generator lateness p99 ${steady.sendLagP99} ms`,
    );
    // When were the slowest 1 % due? Counted per 100 ms window: a few crowded windows mean stalls.
    const cut =
      [...latency].sort((a, b) => b - a)[Math.floor(latency.length / 100)] ?? Number.POSITIVE_INFINITY;
    const windows = new Map<number, number>();
    for (const [i, l] of latency.entries()) {
      if (l <= cut) continue;
      const w = Math.floor(due[i]! / 100);
      windows.set(w, (windows.get(w) ?? 0) + 1);
    }
    const list = [...windows].sort((a, b) => a[0] - b[0]).map(([w, n]) => `${(w / 10).toFixed(1)} s: ${n}`);
    console.log(`slowest 1 % (over ${cut.toFixed(1)} ms) by due time, per 100 ms window: ${list.join(', ')}`);
  }
} finally {
  await svc.stop();
}
if (!cpuProf) process.exit(0);

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
// The main thread's profile is written first (lowest thread id); a writer thread writes its own.
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.cpuprofile'))
  .sort();
const file = process.env.PROFILE_THREAD === 'writer' ? files.at(-1) : files[0];
if (!file) throw new Error('no profile written');
if (files.length > 1) console.log(`profiles: ${files.join(', ')}`);
const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
};
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<number, number>();
for (const [i, id] of profile.samples.entries())
  self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
const total = [...self.values()].reduce((a, b) => a + b, 0);

const area = (url: string, fn: string): string => {
  if (fn === '(garbage collector)') return 'gc';
  if (fn === '(idle)' || fn === '(program)') return fn;
  if (url.includes('better-sqlite3') || fn === 'run' || fn === 'get' || fn === 'exec') return 'sqlite';
  if (url.includes('/pg') || url.includes('pg-protocol')) return 'pg';
  // The service runs compiled (dist/) or from its sources (src/).
  if (/\/(src|dist)\/ledger\//.test(url)) return 'ledger';
  if (/\/(src|dist)\/enforcement\//.test(url)) return 'enforcement';
  if (url.includes('policy-engine')) return 'policy-engine';
  if (/\/packages\/server\/(src|dist)\//.test(url)) return 'server (other)';
  if (url.includes('fastify') || url.includes('find-my-way') || url.includes('avvio')) return 'fastify';
  if (url.includes('pino')) return 'pino';
  if (url.includes('kysely')) return 'kysely';
  if (url.startsWith('node:') || url === '') return 'node core / native';
  return 'other deps';
};
const areas = new Map<string, number>();
const fns = new Map<string, number>();
for (const [id, t] of self) {
  const n = byId.get(id)!;
  const a = area(n.callFrame.url, n.callFrame.functionName);
  areas.set(a, (areas.get(a) ?? 0) + t);
  const short = n.callFrame.url.split('/').slice(-2).join('/');
  const k = `${n.callFrame.functionName || '(anonymous)'} ${short}:${n.callFrame.lineNumber + 1}`;
  fns.set(k, (fns.get(k) ?? 0) + t);
}
const busy = total - (areas.get('(idle)') ?? 0);
console.log(`profile ${join(dir, file)}  ${rps.toFixed(0)} req/s over ${seconds} s`);
console.log(`busy ${(busy / 1e6).toFixed(1)} s of ${(total / 1e6).toFixed(1)} s sampled`);
const perReq = (t: number) => (rps > 0 ? (t / (rps * (seconds + 2))).toFixed(1) : '?');
console.log('\nself time by area (share of busy time, ≈ µs per request)');
for (const [a, t] of [...areas].sort((x, y) => y[1] - x[1])) {
  if (a === '(idle)') continue;
  console.log(`  ${a.padEnd(20)} ${((100 * t) / busy).toFixed(1).padStart(5)} %  ${perReq(t)}`);
}
console.log('\ntop functions by self time');
for (const [k, t] of [...fns].sort((x, y) => y[1] - x[1]).slice(0, 30)) {
  console.log(`  ${((100 * t) / busy).toFixed(1).padStart(5)} %  ${k}`);
}
