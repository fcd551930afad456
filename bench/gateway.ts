/**
 * MCP gateway overhead against the reference server `@modelcontextprotocol/server-everything`
 * (Streamable HTTP, run as it ships): `tools/call echo` with the official SDK client, straight to the
 * server, through the gateway, and through a bare pass-through proxy (bench/passthrough-proxy.ts: the
 * extra hop alone, the floor under any gateway), one call in flight, the three paths interleaved call
 * by call so all see the same machine. The server, the service and the proxy run in child processes;
 * the clients run here.
 * Run: node --import tsx bench/gateway.ts (BENCH_GATEWAY_CALLS sets the calls per path, default 3000).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { api, type Child, provisionKey, readMetrics, serviceEnv, startChild, statCpuMs } from './lib.js';

const ROOT = join(import.meta.dirname, '..');

export interface PathFigures {
  calls: number;
  errors: number;
  p50: number;
  p99: number;
}

export interface GatewayBenchResult {
  direct: PathFigures;
  gateway: PathFigures;
  proxy: PathFigures;
  addedP50: number;
  addedP99: number;
  /** Added by the bare pass-through proxy: the hop's own share of the gateway's added latency. */
  hopP50: number;
  hopP99: number;
  recorded: number;
  answered: number;
  lines: string[];
}

/** server-everything in Streamable HTTP mode; up once its port answers HTTP at all. */
async function startEverything(port: number): Promise<Child> {
  const entry = createRequire(join(ROOT, 'packages/server/package.json')).resolve(
    '@modelcontextprotocol/server-everything/dist/index.js',
  );
  const proc = spawn(process.execPath, [entry, 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'ignore'],
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error('server-everything exited');
    const up = await fetch(`http://127.0.0.1:${port}/`).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) throw new Error('server-everything did not start');
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

async function connect(url: string, headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'bench', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

/** CPU ms used so far by a process (Linux /proc; null elsewhere). */
function cpuMs(pid: number | undefined): number | null {
  try {
    return statCpuMs(`/proc/${pid}/stat`);
  } catch {
    return null;
  }
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
const round3 = (n: number) => Math.round(n * 1000) / 1000;

const figures = (times: number[], errors: number): PathFigures => {
  const sorted = [...times].sort((a, b) => a - b);
  return {
    calls: times.length + errors,
    errors,
    p50: round3(quantile(sorted, 0.5)),
    p99: round3(quantile(sorted, 0.99)),
  };
};

export async function runGatewayBench(opts: { calls: number; port: number }): Promise<GatewayBenchResult> {
  const lines: string[] = [];
  const log = (s: string) => {
    lines.push(s);
    console.log(s);
  };
  const upPort = opts.port + 1;
  const proxyPort = opts.port + 2;
  const everything = await startEverything(upPort);
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-gw-'));
  const svcBase = `http://127.0.0.1:${opts.port}`;
  let svc: Child | null = null;
  let proxy: Child | null = null;
  const clients: Client[] = [];
  try {
    svc = await startChild(
      'node',
      // The working tree's sources (not a dist/ that may predate them); BENCH_SVC_PROF=<dir>: a CPU
      // profile of the service, written when it stops.
      [
        '--conditions=@svc/source',
        '--import',
        'tsx',
        ...(process.env.BENCH_SVC_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_SVC_PROF}`] : []),
        join(ROOT, 'packages/server/bin/svc.js'),
        'serve',
      ],
      serviceEnv(opts.port, `sqlite:${join(dir, 'svc.db')}`),
      `${svcBase}/readyz`,
    );
    const key = await provisionKey(svcBase);
    const headers = { 'x-service-api-key': key };
    // A policy the call passes: the gateway evaluates it and records the decision with its receipt.
    await api(svcBase, '/v1/policies', {
      method: 'POST',
      headers,
      body: {
        toolName: 'echo',
        mode: 'deterministic',
        constraints: [
          { argumentName: 'message', enabled: true, required: true, maxLength: 100, regex: '^[a-z ]+$' },
        ],
      },
    });
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await api(svcBase, '/v1/mcp/upstreams', {
      method: 'POST',
      headers,
      body: { name: 'Everything', slug: 'everything', url: upstreamUrl, timeoutMs: 5000 },
    });
    proxy = await startChild(
      'node',
      ['--import', 'tsx', join(ROOT, 'bench/passthrough-proxy.ts')],
      { PORT: String(proxyPort), UPSTREAM: `http://127.0.0.1:${upPort}/` },
      `http://127.0.0.1:${proxyPort}/readyz`,
    );
    const direct = await connect(upstreamUrl, {});
    const gateway = await connect(`${svcBase}/v1/mcp/everything`, headers);
    const viaProxy = await connect(`http://127.0.0.1:${proxyPort}/mcp`, {});
    clients.push(direct, gateway, viaProxy);

    const call = { name: 'echo', arguments: { message: 'hello gateway' } };
    const time = async (c: Client, into: number[]): Promise<boolean> => {
      const started = performance.now();
      try {
        const r = await c.callTool(call);
        if (r.isError) return false;
        into.push(performance.now() - started);
        return true;
      } catch {
        return false;
      }
    };
    const warmDirect: number[] = [];
    const warmGateway: number[] = [];
    const warmProxy: number[] = [];
    for (let i = 0; i < Math.min(300, opts.calls); i++) {
      await time(direct, warmDirect);
      await time(gateway, warmGateway);
      await time(viaProxy, warmProxy);
    }
    const cpuBefore = [cpuMs(svc.proc.pid), cpuMs(everything.proc.pid)];
    const paths = [
      { client: direct, times: [] as number[], errors: 0 },
      { client: gateway, times: [] as number[], errors: 0 },
      { client: viaProxy, times: [] as number[], errors: 0 },
    ];
    for (let i = 0; i < opts.calls; i++) {
      // Rotate which path goes first, so none always follows another.
      for (let k = 0; k < paths.length; k++) {
        const path = paths[(i + k) % paths.length]!;
        if (!(await time(path.client, path.times))) path.errors++;
      }
    }
    const cpuAfter = [cpuMs(svc.proc.pid), cpuMs(everything.proc.pid)];
    const [df, gf, pf] = paths.map((p) => figures(p.times, p.errors)) as [
      PathFigures,
      PathFigures,
      PathFigures,
    ];
    const addedP50 = round3(gf.p50 - df.p50);
    const addedP99 = round3(gf.p99 - df.p99);
    const hopP50 = round3(pf.p50 - df.p50);
    const hopP99 = round3(pf.p99 - df.p99);
    const line = (label: string, f: PathFigures) =>
      `${label.padEnd(47)}${f.calls} calls, one in flight  p50 ${f.p50} ms  p99 ${f.p99} ms  errors ${f.errors}`;
    log('command: node --import tsx bench/gateway.ts (BENCH_GATEWAY_CALLS sets the calls per path)');
    log(line('tools/call echo straight to server-everything', df));
    log(line('tools/call echo through the gateway', gf));
    log(line('tools/call echo through a bare proxy', pf));
    log(
      `added by the gateway                           p50 ${addedP50} ms (goal <= 1 ms)  p99 ${addedP99} ms (goal <= 5 ms)`,
    );
    log(`added by the bare proxy (the hop alone)        p50 ${hopP50} ms  p99 ${hopP99} ms`);
    if (cpuBefore.every((x) => x !== null) && cpuAfter.every((x) => x !== null)) {
      // Load-independent: CPU the service spends per gateway call, and the upstream per call (it serves both paths).
      const perCall = (i: number, n: number) => round3((cpuAfter[i]! - cpuBefore[i]!) / n);
      log(
        `CPU per call: service ${perCall(0, opts.calls)} ms per gateway call, server-everything ${perCall(1, paths.length * opts.calls)} ms per call`,
      );
    }
    // Where the service committed, warm-up included: a lone call's commit runs on the event loop
    // unless those commits were slow (ledger/writer.ts), and the figures depend on which.
    const value = await readMetrics(svcBase);
    if (!value) throw new Error('GET /metrics did not answer');
    const [onLoop, inThread] = ['event_loop', 'thread'].map((on) =>
      value(`svc_decision_commits_total\\{on="${on}"\\}`),
    ) as [number, number];
    if (Number.isNaN(onLoop) && Number.isNaN(inThread))
      throw new Error('/metrics has no svc_decision_commits_total');
    // A place with no commit yet has no line.
    log(`commits of the service: ${onLoop || 0} on the event loop, ${inThread || 0} in the writer thread`);
    const listed = await api(svcBase, '/v1/decisions?limit=1', { headers });
    const recorded = listed.pagination.total as number;
    // Every answered gateway call is a recorded decision.
    const answered = warmGateway.length + gf.calls - gf.errors;
    log(`gateway calls answered ${answered}, decisions recorded ${recorded}`);
    return {
      direct: df,
      gateway: gf,
      proxy: pf,
      addedP50,
      addedP99,
      hopP50,
      hopP99,
      recorded,
      answered,
      lines,
    };
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
    await svc?.stop();
    await proxy?.stop();
    await everything.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await runGatewayBench({ calls: Number(process.env.BENCH_GATEWAY_CALLS ?? 3000), port: 18490 });
}
