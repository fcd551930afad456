/**
 * Property-based fuzzing of every route: hostile requests generated from each route's own schemas
 * (wrong types, deep nesting, out-of-range numbers, bad encodings, prototype keys, oversized bodies,
 * bad ids and credentials), sent by an attacker tenant. Asserts: never a 5xx, every error in the
 * envelope, nothing of the victim tenant leaks or changes, an error changes nothing of the attacker's
 * either, and the server stays healthy. Replay a run with FUZZ_SEED=<printed seed>; FUZZ_RUNS sets
 * the number of requests; FUZZ_TRACE=<file> appends each request (and its status) to a file, to find
 * what a run that stops answering was doing.
 */
import { appendFileSync } from 'node:fs';
import fc from 'fast-check';
import type { InjectOptions } from 'fastify';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { STATUS_BY_CODE } from '../src/lib/errors.js';
import { useTestApp } from './fixture.js';
import { authsFor, poolsOf, type Seeded, seedTenant, snapshot } from './fuzz/fixtures.js';
import { type Auth, type HostileRequest, type Pools, type RouteSpec, requestArb } from './fuzz/hostile.js';
import { keyHeader, type TestApp } from './helpers.js';
import { registered } from './route-recorder.js';

// Every route the app registers, with its schemas (./route-recorder.ts).
vi.mock('fastify', async (importOriginal) =>
  (await import('./route-recorder.js')).recordingFastify(
    importOriginal as () => Promise<typeof import('fastify')>,
  ),
);

const SEED = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUNS = Number(process.env.FUZZ_RUNS ?? 1500);
const VICTIM_MARK = 'victim-marker-7f3a9c';
/**
 * The path and query the server receives: inject parses the URL as WHATWG URLs are parsed, so dot
 * segments, encoded ones included (`%2e%2e`), are resolved before the request reaches the routes.
 * As inject does (light-my-request's parse-url), a URL starting with `//` is a path, not a host.
 */
function delivered(req: HostileRequest): { path: string; url: string } {
  const base = 'http://localhost';
  const u = new URL(req.url.startsWith('//') ? base + req.url : req.url, base);
  return { path: u.pathname, url: u.pathname + u.search };
}

/** POST /v1/mcp/charter and /v1/mcp/:upstreamSlug answer in JSON-RPC, not the envelope (docs/api-notes.md). */
const speaksJsonRpc = (req: HostileRequest) =>
  req.method === 'POST' && /^\/v1\/mcp\/(?!upstreams(?:[/?]|$))[^/?]+(?:\?|$)/.test(delivered(req).url);

interface Answer {
  statusCode: number;
  headers: Record<string, unknown>;
  body: string;
}

/** Sends one request; an event stream that opens is checked for its status and then dropped. */
async function send(t: TestApp, req: HostileRequest): Promise<Answer> {
  const res = await t.app.inject({
    method: req.method as InjectOptions['method'],
    url: req.url,
    headers: req.headers,
    ...(req.payload === undefined ? {} : { payload: req.payload }),
    payloadAsStream: true,
  });
  const stream = res.stream();
  if (String(res.headers['content-type'] ?? '').includes('text/event-stream')) {
    stream.destroy();
    return { statusCode: res.statusCode, headers: res.headers, body: '' };
  }
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return { statusCode: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') };
}

const routeKey = (r: RouteSpec) => `${r.method} ${r.url}`;

/** A request left unanswered is a failure too: it would hold a client (and a connection) forever. */
async function withinTime<T>(answer: Promise<T>, what: string, ms = 15_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([answer, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Answers in envelope B: anything under the payment gateway's prefix, and the key set's own route (GET). */
function speaksEnvelopeB(req: HostileRequest): boolean {
  const { path } = delivered(req);
  // The key set answers envelope B to every method; paths below it are unknown routes (envelope A).
  if (path === '/.well-known/svc-keys.json') return true;
  return path === '/v1/gateway' || path.startsWith('/v1/gateway/');
}

function checkAnswer(req: HostileRequest, res: Answer): void {
  const where = `${req.method} ${req.url.slice(0, 200)} (${req.auth}) answered ${res.statusCode} ${res.body.slice(0, 300)}`;
  expect(res.statusCode, where).toBeLessThan(500);
  expect(res.headers['x-request-id'], where).toBeTruthy();
  expect(res.body.includes(VICTIM_MARK), `leak: ${where}`).toBe(false);
  if (res.statusCode < 400 || req.method === 'HEAD') return;
  const body = JSON.parse(res.body) as Record<string, unknown>;
  if (speaksJsonRpc(req) && body.jsonrpc === '2.0') {
    const error = body.error as { code?: unknown; message?: unknown };
    expect(typeof error?.code === 'number' && typeof error.message === 'string', where).toBe(true);
    return;
  }
  expect(Object.keys(body), where).toEqual(['error']);
  const error = body.error as Record<string, unknown>;
  if (speaksEnvelopeB(req)) {
    // The payment gateway and its key set answer envelope B (SPEC section 7), with the catalog's extras.
    const keys = Object.keys(error);
    for (const k of ['type', 'code', 'message', 'param', 'doc_url', 'hint', 'request_id']) {
      expect(keys, where).toContain(k);
    }
    expect(typeof error.code === 'string' && typeof error.message === 'string', where).toBe(true);
    expect(error.request_id, where).toBe(res.headers['x-request-id']);
    return;
  }
  expect(Object.keys(error).sort(), where).toEqual(['code', 'message']);
  expect(typeof error.message, where).toBe('string');
  expect(STATUS_BY_CODE[error.code as keyof typeof STATUS_BY_CODE], where).toBe(res.statusCode);
}

describe(`fuzzing every route (seed ${SEED}, ${RUNS} requests; replay with FUZZ_SEED=${SEED})`, () => {
  let attacker: Seeded;
  let victim: Seeded;
  let routes: RouteSpec[];
  let pools: Pools;
  let auths: Auth[];
  let victimBefore: string;

  const t = useTestApp();
  beforeAll(async () => {
    console.log(`fuzz seed ${SEED} (replay: FUZZ_SEED=${SEED} FUZZ_RUNS=${RUNS})`);
    victim = await seedTenant(t, VICTIM_MARK);
    attacker = await seedTenant(t, 'attacker-data');
    pools = poolsOf(attacker, victim);
    auths = await authsFor(t, attacker, victim);
    routes = registered
      .flatMap((r) => (Array.isArray(r.method) ? r.method : [r.method]).map((m) => ({ ...r, method: m })))
      .filter((r) => r.method !== 'HEAD')
      .map((r) => ({ method: r.method, url: r.url, schema: (r.schema ?? {}) as RouteSpec['schema'] }));
    victimBefore = await snapshot(t, victim);
  }, 120_000);

  it('sees every route of the API', () => {
    const keys = routes.map(routeKey);
    for (const expected of [
      'POST /v1/policies',
      'PUT /v1/policies/:toolName',
      'POST /v1/tools/validate',
      'POST /v1/approvals',
      'POST /v1/policy-drafts',
      'GET /v1/mcp/upstreams',
      'POST /v1/mcp/:upstreamSlug',
      'GET /ws',
    ]) {
      expect(keys).toContain(expected);
    }
    expect(keys.length).toBeGreaterThan(60);
  });

  it('never answers 5xx, answers every error in the envelope, and leaks nothing', async () => {
    let sent = 0;
    const statuses = new Map<number, number>();
    const succeeded = new Set<string>();
    const property = fc.asyncProperty(
      fc.oneof(...routes.map((r) => requestArb(r, pools, auths))),
      async (req) => {
        if (process.env.FUZZ_TRACE)
          appendFileSync(process.env.FUZZ_TRACE, `${JSON.stringify(req).slice(0, 3000)}\n`);
        // A failed write of the attacker's own must leave its data as it was.
        const write = req.own && req.method !== 'GET' && req.method !== 'HEAD';
        const before = write ? await snapshot(t, attacker) : null;
        const res = await withinTime(send(t, req), `${req.method} ${req.url.slice(0, 200)} (${req.auth})`);
        if (process.env.FUZZ_TRACE) appendFileSync(process.env.FUZZ_TRACE, `answered ${res.statusCode}\n`);
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
        if (res.statusCode < 300) succeeded.add(req.route);
        checkAnswer(req, res);
        if (before !== null && res.statusCode >= 400) {
          expect(
            await snapshot(t, attacker),
            `${req.method} ${req.url} changed data with ${res.statusCode}`,
          ).toBe(before);
        }
        if (++sent % 250 === 0) {
          expect((await t.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
        }
      },
    );
    await fc.assert(property, { seed: SEED, numRuns: RUNS, endOnFailure: true });
    const byStatus = [...statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`);
    console.log(
      `fuzz answers by status: ${byStatus.join(', ')}; routes with a 2xx: ${succeeded.size}/${routes.length}`,
    );
    expect(Object.prototype).not.toHaveProperty('polluted');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  }, 600_000);

  it("leaves the victim's data unchanged, and the server healthy", async () => {
    expect(await snapshot(t, victim)).toBe(victimBefore);
    expect((await t.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    expect((await t.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const call = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(victim.tenant.apiKey),
      payload: { tool_name: victim.toolName, arguments: { note: VICTIM_MARK } },
    });
    expect(call.statusCode, call.body).toBe(200);
  });
});
