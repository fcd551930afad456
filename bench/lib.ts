import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { signUserToken } from '../packages/server/src/lib/jwt.js';

export interface Child {
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** Starts a child process and waits until `url` answers 200. */
export async function startChild(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  readyUrl: string,
): Promise<Child> {
  const proc = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${cmd} ${args.join(' ')} exited with ${proc.exitCode}`);
    try {
      if ((await fetch(readyUrl)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`${readyUrl} did not become ready`);
    }
    await sleep(100);
  }
  return {
    proc,
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

export interface LoadOptions {
  url: string;
  connections: number;
  durationS: number;
  headers?: Record<string, string>;
  bodies: string[];
}

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  ok: number;
  non2xx: number;
  errors: number;
}

export async function load(o: LoadOptions): Promise<LoadResult> {
  const result = await autocannon({
    url: o.url,
    method: 'POST',
    connections: o.connections,
    duration: o.durationS,
    headers: { 'content-type': 'application/json', ...o.headers },
    requests: o.bodies.map((body) => ({ method: 'POST', body })),
  });
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    ok: result['2xx'],
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  };
}

/**
 * CPU time (utime + stime) in ms from a Linux stat file: /proc/PID/stat for a whole process,
 * /proc/PID/task/TID/stat for one thread. Fields 14 and 15, in clock ticks of 10 ms.
 */
export function statCpuMs(path: string): number {
  const fields = readFileSync(path, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });

export const SECRET = 'bench-secret-bench-secret-bench-secret';
export const ADMIN = 'bench-admin-token-0001';

/**
 * The service's /metrics (admin token), as a reader of one sample's value by its name and labels,
 * written as a regular expression (`svc_decision_commits_total\\{on="thread"\\}`): NaN when the
 * sample is absent. Null when /metrics does not answer.
 */
export async function readMetrics(base: string): Promise<((sample: string) => number) | null> {
  const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } });
  if (!res.ok) return null;
  const text = await res.text();
  return (sample) => Number(new RegExp(`^${sample} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}

/** Environment of a benchmarked `svc serve` child. */
export const serviceEnv = (port: number, databaseUrl: string): NodeJS.ProcessEnv => ({
  PORT: String(port),
  SVC_DATABASE_URL: databaseUrl,
  SVC_JWT_SECRET: SECRET,
  SVC_ADMIN_TOKEN: ADMIN,
  SVC_LOG_LEVEL: 'warn',
});

export async function api(
  base: string,
  path: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown },
) {
  const res = await fetch(base + path, {
    method: init.method ?? 'GET',
    headers: { 'content-type': 'application/json', ...init.headers },
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path} → ${res.status} ${text}`);
  return JSON.parse(text);
}

/** An organization on the enterprise tier (so the rate limit does not cap the load) and a project key. */
export async function provisionKey(base: string, slug = 'bench'): Promise<string> {
  const token = await signUserToken(SECRET, 'bench-user', 3600, { jwtIssuer: null, jwtAudience: null });
  const auth = { authorization: `Bearer ${token}` };
  const org = await api(base, '/v1/organizations', {
    method: 'POST',
    headers: auth,
    body: { name: 'Bench', slug },
  });
  await api(base, `/v1/admin/organizations/${org._id}`, {
    method: 'PATCH',
    headers: { authorization: `Bearer ${ADMIN}` },
    body: { tier: 'enterprise', rateLimitPerMinute: 1_000_000 },
  });
  const project = await api(base, '/v1/projects', {
    method: 'POST',
    headers: auth,
    body: { organizationId: org._id, name: 'p' },
  });
  return project.apiKey as string;
}
