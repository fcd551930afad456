/**
 * CPU time of the service per POST /v1/tools/validate, measured in one process without sockets:
 * node --conditions=@svc/source --import tsx bench/validate-cpu.ts
 *
 * The app is built as `svc serve` builds it (embedded store in a file, WAL, synchronous=FULL) and
 * driven through Fastify's inject by CPU_CONCURRENCY (default 32) callers in a loop, CPU_REQUESTS
 * (default 20,000) calls in all. process.cpuUsage over the measured calls, divided by their count,
 * is the service's own work per decision (routing, hooks, auth, pipeline, receipts, SQLite, GC) plus
 * the small, constant cost of inject; HTTP parsing and the socket are not in it. Then the same calls
 * given to the enforcement pipeline directly (`enforce`, as the route does after its hooks). The
 * event loop's share is printed apart (the rest is mostly the decision writer's thread). Waiting for fsync
 * is not CPU, so the figure barely moves with the machine's load or disk, unlike a req/s rate.
 * CPU_DB=postgres://... measures on PostgreSQL (this process's CPU only, not the database's).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../packages/server/src/app.js';
import { loadConfig } from '../packages/server/src/config.js';
import { callScopeOf } from '../packages/server/src/enforcement/model.js';
import { openStore } from '../packages/server/src/storage/db.js';
import { migrateToLatest } from '../packages/server/src/storage/migrate.js';
import { ADMIN, SECRET, statCpuMs } from './lib.js';
import { BODIES, provision } from './validate.js';

const total = Number(process.env.CPU_REQUESTS ?? 20_000);
const concurrency = Number(process.env.CPU_CONCURRENCY ?? 32);
const url = process.env.CPU_DB ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'svc-cpu-')), 'svc.db')}`;

const config = {
  ...loadConfig({}),
  jwtSecret: SECRET,
  adminToken: ADMIN,
  databaseUrl: url,
  logLevel: 'warn' as const,
};
const store = openStore(url);
await migrateToLatest(store);
// CPU_FSYNC=false: commits without fsync, so that a CPU profile (which samples wall time on the
// thread) shows CPU work rather than time blocked in fsync. Never how the service runs.
if (process.env.CPU_FSYNC === 'false') store.sqlite?.pragma('synchronous = OFF');
const { app, ctx } = await buildApp({ config, store, logger: false });
const address = await app.listen({ port: 0, host: '127.0.0.1' });
const key = await provision(address, `cpu-${Date.now()}`);

const principal = await ctx.keys.authenticate(key);
if (!principal) throw new Error('the provisioned key does not authenticate');
const scope = callScopeOf(principal);
const calls = BODIES.map(
  (b) =>
    JSON.parse(b) as {
      tool_name: string;
      arguments: Record<string, unknown>;
      context?: Record<string, unknown>;
    },
);

/** One validate call through HTTP routing, hooks and the route (inject, no socket); true if 200. */
async function viaInject(i: number): Promise<boolean> {
  const res = await app.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: { 'content-type': 'application/json', 'x-service-api-key': key },
    payload: BODIES[i % BODIES.length]!,
  });
  return res.statusCode === 200;
}

/** The same call given to the enforcement pipeline directly, as the route does after its hooks. */
async function viaPipeline(i: number): Promise<boolean> {
  const c = calls[i % calls.length]!;
  await ctx.enforcement.enforce({
    scope,
    call: { toolName: c.tool_name, arguments: c.arguments, context: c.context ?? {} },
    source: 'server',
    latencyMs: 0,
  });
  return true;
}

/** `n` calls from `concurrency` callers in a loop; how many failed. */
async function run(n: number, call: (i: number) => Promise<boolean>): Promise<number> {
  let next = 0;
  let failed = 0;
  const caller = async () => {
    while (next < n) if (!(await call(next++))) failed++;
  };
  await Promise.all(Array.from({ length: concurrency }, caller));
  return failed;
}

// The event loop's own share (Linux): its thread's id is the process id.
const mainStat = `/proc/self/task/${process.pid}/stat`;

async function measure(label: string, call: (i: number) => Promise<boolean>): Promise<void> {
  await run(Math.min(5_000, total), call); // warm-up: JIT, caches
  const m0 = statCpuMs(mainStat);
  const t0 = process.cpuUsage();
  const w0 = performance.now();
  const failed = await run(total, call);
  const cpu = process.cpuUsage(t0);
  const mainMs = statCpuMs(mainStat) - m0;
  const wall = performance.now() - w0;
  console.log(
    `${label}: ${total} calls, ${concurrency} in flight, ${failed} failed: ` +
      `${((cpu.user + cpu.system) / total).toFixed(1)} µs CPU per call ` +
      `(user ${(cpu.user / total).toFixed(1)}, system ${(cpu.system / total).toFixed(1)}; ` +
      `event loop ${((mainMs * 1000) / total).toFixed(1)}), ` +
      `${((total * 1000) / wall).toFixed(0)} calls/s wall`,
  );
}

await measure('POST /v1/tools/validate (inject)', viaInject);
await measure('the pipeline alone (enforce)', viaPipeline);

// The writer's group commit: batch size decides how much of the commit each decision carries.
const metrics = (
  await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${ADMIN}` } })
).body;
const sum = Number(/svc_decision_commit_batch_size_sum (\S+)/.exec(metrics)?.[1]);
const count = Number(/svc_decision_commit_batch_size_count (\S+)/.exec(metrics)?.[1]);
if (count > 0)
  console.log(
    `commits: ${count}, ${(sum / count).toFixed(1)} decisions per commit on average (both measurements and their warm-ups)`,
  );
await app.close();
await store.close();
