/**
 * MCP gateway overhead: tools/call straight to a real MCP upstream and through the gateway, with the
 * same client code and payload, at a fixed rate, in one run. The upstream and the service run in
 * child processes; the paced client runs here. Run: node --import tsx bench/run.ts (or import it).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { api, provisionKey, serviceEnv, startChild } from './lib.js';

const ROOT = join(import.meta.dirname, '..');

export interface PathFigures {
  calls: number;
  errors: number;
  p50: number;
  p99: number;
}

export interface GatewayBenchResult {
  rate: number;
  direct: PathFigures;
  gateway: PathFigures;
  validate: PathFigures;
  addedP50: number;
  addedP99: number;
  recorded: number;
  answered: number;
  lines: string[];
}

/** Enterprise organization (no rate-limit cap), a key, the upstream, and a policy that the call passes. */
async function provision(base: string, upstreamUrl: string): Promise<string> {
  const key = await provisionKey(base);
  const headers = { 'x-service-api-key': key };
  await api(base, '/v1/policies', {
    method: 'POST',
    headers,
    body: {
      toolName: 'echo',
      mode: 'deterministic',
      constraints: [
        { argumentName: 'text', enabled: true, required: true, maxLength: 100, regex: '^[a-z ]+$' },
      ],
    },
  });
  await api(base, '/v1/mcp/upstreams', {
    method: 'POST',
    headers,
    body: {
      name: 'Bench upstream',
      slug: 'bench',
      transport: 'mcp-streamable-http',
      url: upstreamUrl,
      timeoutMs: 5000,
    },
  });
  return key;
}

const CALL = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'tools/call',
  params: { name: 'echo', arguments: { text: 'hello gateway' } },
});

// The same tool call as a validate request: the policy check and durable record alone, for reference.
const VALIDATE = JSON.stringify({ tool_name: 'echo', arguments: { text: 'hello gateway' } });

/** One POST; resolves with its latency in ms, or null unless it answered 200 with a result. */
function post(url: URL, agent: Agent, headers: Record<string, string>, body: string): Promise<number | null> {
  return new Promise((resolve) => {
    const started = performance.now();
    const req = request(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'content-length': Buffer.byteLength(body),
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => {
          const elapsed = performance.now() - started;
          const ok = res.statusCode === 200 && (body === VALIDATE || text.includes('"result"'));
          resolve(ok ? elapsed : null);
        });
      },
    );
    req.on('error', () => resolve(null));
    req.end(body);
  });
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
const round3 = (n: number) => Math.round(n * 1000) / 1000;

/** Open loop: a call is sent every 1/rate s whatever the previous ones are doing. */
async function paced(
  url: string,
  headers: Record<string, string>,
  rate: number,
  durationS: number,
  body = CALL,
): Promise<PathFigures> {
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const target = new URL(url);
  const total = Math.round(rate * durationS);
  const interval = 1000 / rate;
  const pending: Promise<number | null>[] = [];
  const start = performance.now();
  for (let i = 0; i < total; i++) {
    const wait = start + i * interval - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(post(target, agent, headers, body));
  }
  const results = await Promise.all(pending);
  agent.destroy();
  const ok = results.filter((r): r is number => r !== null).sort((a, b) => a - b);
  return {
    calls: total,
    errors: total - ok.length,
    p50: round3(quantile(ok, 0.5)),
    p99: round3(quantile(ok, 0.99)),
  };
}

export async function runGatewayBench(opts: {
  durationS: number;
  rate: number;
  port: number;
}): Promise<GatewayBenchResult> {
  const lines: string[] = [];
  const log = (s: string) => {
    lines.push(s);
    console.log(s);
  };
  const upPort = opts.port + 1;
  const upstream = await startChild(
    'node',
    ['--import', 'tsx', join(ROOT, 'bench/mcp-upstream.ts')],
    { PORT: String(upPort) },
    `http://127.0.0.1:${upPort}/health`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-gw-'));
  const svcBase = `http://127.0.0.1:${opts.port}`;
  let svc: Awaited<ReturnType<typeof startChild>> | null = null;
  try {
    svc = await startChild(
      'node',
      [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
      serviceEnv(opts.port, `sqlite:${join(dir, 'svc.db')}`),
      `${svcBase}/readyz`,
    );
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    const key = await provision(svcBase, upstreamUrl);
    // Identical requests on both paths; the upstream ignores the key header.
    const headers = { 'x-service-api-key': key };
    const gatewayUrl = `${svcBase}/v1/mcp/bench`;

    const warmS = Math.min(3, opts.durationS);
    await paced(upstreamUrl, headers, opts.rate, warmS);
    const warmGateway = await paced(gatewayUrl, headers, opts.rate, warmS);
    const direct = await paced(upstreamUrl, headers, opts.rate, opts.durationS);
    const gateway = await paced(gatewayUrl, headers, opts.rate, opts.durationS);
    // Reference: the same check and durable record without any upstream, through POST /v1/tools/validate.
    const validate = await paced(
      `${svcBase}/v1/tools/validate`,
      headers,
      opts.rate,
      opts.durationS,
      VALIDATE,
    );
    const addedP50 = round3(gateway.p50 - direct.p50);
    const addedP99 = round3(gateway.p99 - direct.p99);
    const line = (label: string, f: PathFigures) =>
      `${label.padEnd(37)}${opts.rate}/s x ${opts.durationS} s  p50 ${f.p50} ms  p99 ${f.p99} ms  errors ${f.errors}`;
    log('command: node --import tsx bench/run.ts (BENCH_DURATION sets the seconds per phase)');
    log(line('tools/call straight to upstream', direct));
    log(line('tools/call through the gateway', gateway));
    log(
      `added by the gateway                 p50 ${addedP50} ms (goal <= 1 ms)  p99 ${addedP99} ms (goal <= 5 ms)`,
    );
    log(line('reference: POST /v1/tools/validate', validate));

    const listed = await api(svcBase, '/v1/decisions?limit=1', { headers });
    // Every answered gateway call and validate call is a recorded decision.
    const recorded = listed.pagination.total as number;
    const answered = [warmGateway, gateway, validate].reduce((n, f) => n + f.calls - f.errors, 0);
    log(`gateway and validate calls answered ${answered}, decisions recorded ${recorded}`);
    return { rate: opts.rate, direct, gateway, validate, addedP50, addedP99, recorded, answered, lines };
  } finally {
    await svc?.stop();
    await upstream.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
