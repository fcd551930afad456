import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import { freshDatabase, JWT_SECRET, TEST_PG_URL, type TestDatabase } from '../../test/helpers.js';
import {
  dropRedisKeys,
  redisPrefix,
  SseClient,
  TEST_REDIS_URL,
  WsClient,
  waitFor,
} from '../../test/streams.js';
import { signUserToken } from '../lib/jwt.js';
import { openStore } from '../storage/db.js';
import { migrateToLatest } from '../storage/migrate.js';

interface Instance {
  url: string;
  child: ChildProcess;
  output: string[];
}

/** Every process started, so that cleanup finds them even when a start failed half-way. */
const children: ChildProcess[] = [];

/** Starts `svc serve` on a free port and resolves with its address once it listens. */
function startInstance(env: Record<string, string>): Promise<Instance> {
  const child = spawn(process.execPath, [...SVC_FLAGS, SVC_BIN, 'serve'], {
    env: { ...process.env, ...env, PORT: '0', HOST: '127.0.0.1', SVC_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const output: string[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`instance did not start:\n${output.join('')}`)), 45_000);
    const onData = (chunk: Buffer) => {
      output.push(String(chunk));
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output.join(''));
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child, output });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`instance exited with ${code}:\n${output.join('')}`));
    });
  });
}

/** SIGTERM (the graceful path operators use), SIGKILL if it has not exited within 10 s. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

interface Tenant {
  token: string;
  orgId: string;
  apiKey: string;
}

async function call(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null };
}

/**
 * Two real `svc serve` processes on one PostgreSQL schema and one Redis prefix behave as one service.
 * PostgreSQL only: one SQLite file is single-process by design.
 */
describe.skipIf(!TEST_PG_URL)('two server processes on PostgreSQL and Redis', () => {
  let db: TestDatabase;
  let a: Instance | undefined;
  let b: Instance | undefined;
  const prefix = redisPrefix();
  let seq = 0;

  const tenant = async (): Promise<Tenant> => {
    const token = await signUserToken(JWT_SECRET, `mp-user-${++seq}`, 3600, {
      jwtIssuer: null,
      jwtAudience: null,
    });
    const auth = { authorization: `Bearer ${token}` };
    const slug = `mp-${prefix.slice(9, 21)}-${seq}`;
    const org = await call(a!.url, 'POST', '/v1/organizations', auth, { name: slug, slug });
    expect(org.status).toBe(201);
    const project = await call(a!.url, 'POST', '/v1/projects', auth, {
      organizationId: org.json._id,
      name: 'Main',
    });
    expect(project.status).toBe(201);
    return { token, orgId: org.json._id, apiKey: project.json.apiKey };
  };
  const key = (t: Tenant) => ({ 'x-service-api-key': t.apiKey });
  const user = (t: Tenant) => ({ authorization: `Bearer ${t.token}`, 'x-organization-id': t.orgId });
  const validate = (i: Instance, t: Tenant, tool: string, args: object = {}, context: object = {}) =>
    call(i.url, 'POST', '/v1/tools/validate', key(t), { tool_name: tool, arguments: args, context });

  beforeAll(async () => {
    db = await freshDatabase();
    // Migrated once up front, so the two processes start on a ready schema.
    const store = openStore(db.url);
    await migrateToLatest(store);
    await store.close();
    const env = {
      SVC_DATABASE_URL: db.url,
      SVC_REDIS_URL: TEST_REDIS_URL,
      SVC_REDIS_PREFIX: prefix,
      SVC_JWT_SECRET: JWT_SECRET,
    };
    [a, b] = await Promise.all([startInstance(env), startInstance(env)]);
  });

  afterAll(async () => {
    await Promise.all(children.splice(0).map(stop));
    await db?.drop();
    await dropRedisKeys(prefix);
  });

  it('delivers an event produced on A to SSE and WebSocket clients of B', async () => {
    const t = await tenant();
    const sse = await SseClient.open(`${b!.url}/v1/events/stream`, key(t));
    const ws = await WsClient.open(`${b!.url.replace(/^http/, 'ws')}/ws?token=${t.token}`);
    try {
      await waitFor(() => sse.comments.includes('ok'), ':ok');
      expect((await validate(a!, t, 'cross_instance')).status).toBe(200);
      const e = await sse.waitForEvent((x) => x.event === 'decision.created', 'SSE event on B');
      expect(e.data).toMatchObject({ toolName: 'cross_instance', decision: 'allow' });
      const f = await ws.waitForFrame((x) => x.type === 'decision.created', 'WebSocket frame on B');
      expect(f.data).toMatchObject({ toolName: 'cross_instance' });
    } finally {
      sse.close();
      ws.close();
    }
  });

  it('sees a policy created or replaced on A in the next validate on B', async () => {
    const t = await tenant();
    expect((await validate(b!, t, 'pay', { amount: 500 })).json.decision).toBe('allow');
    const created = await call(a!.url, 'POST', '/v1/policies', key(t), {
      toolName: 'pay',
      constraints: [{ argumentName: 'amount', maximum: 100 }],
    });
    expect(created.status).toBe(201);
    expect((await validate(b!, t, 'pay', { amount: 500 })).json.decision).toBe('deny');
    const replaced = await call(a!.url, 'PUT', '/v1/policies/pay', key(t), {
      constraints: [{ argumentName: 'amount', maximum: 1000 }],
    });
    expect(replaced.status).toBe(200);
    expect((await validate(b!, t, 'pay', { amount: 500 })).json.decision).toBe('allow');
  });

  it('refuses on B a key revoked on A, on the very next request', async () => {
    const t = await tenant();
    expect((await validate(b!, t, 'warm')).status).toBe(200);
    const list = await call(a!.url, 'GET', '/v1/api-keys', user(t));
    const revoked = await call(a!.url, 'POST', `/v1/api-keys/${list.json.data[0].id}/revoke`, user(t));
    expect(revoked.status).toBe(200);
    const refused = await validate(b!, t, 'warm');
    expect(refused.status).toBe(401);
  });

  it('shares the per-key rate limit: 30 on A, then the 61st call (on B) is refused', async () => {
    // A run that straddles a minute boundary counts in two windows; then it is repeated with a new key.
    for (let attempt = 0; attempt < 2; attempt++) {
      const t = await tenant();
      const results = [];
      for (let i = 0; i < 61; i++) results.push(await validate(i < 30 ? a! : b!, t, 'limited'));
      const resets = new Set(results.map((r) => r.headers.get('x-ratelimit-reset')));
      if (resets.size > 1) continue;
      expect(results.slice(0, 60).every((r) => r.status === 200)).toBe(true);
      expect(results[59]!.headers.get('x-ratelimit-remaining')).toBe('0');
      expect(results[60]!.status).toBe(429);
      expect(results[60]!.json.error.code).toBe('rate_limit_exceeded');
      return;
    }
    throw new Error('two attempts straddled a window boundary');
  });

  it('shares session counters: exactly 10 of 40 parallel calls split across A and B are allowed', async () => {
    const t = await tenant();
    const created = await call(a!.url, 'POST', '/v1/policies', key(t), {
      toolName: 'metered',
      sessionConstraints: { maxCalls: 10 },
    });
    expect(created.status).toBe(201);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        validate(i % 2 ? a! : b!, t, 'metered', {}, { session_id: 'shared' }),
      ),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(results.filter((r) => r.json.decision === 'allow')).toHaveLength(10);
  });

  it('keeps a spend budget exact: 100 parallel $10 authorizations split across A and B, 10 allowed', async () => {
    const t = await tenant();
    const config = await call(a!.url, 'PUT', '/v1/economic/config', user(t), {
      approvedPayers: ['corp'],
      defaultPayer: 'corp',
      sessionLimitUsd: 100,
    });
    expect(config.status).toBe(200);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        call(i % 2 ? a!.url : b!.url, 'POST', '/v1/economic/authorize', key(t), {
          actionId: `buy-${i}`,
          sessionId: 'shared',
          agentId: 'agent',
          toolName: 'buy',
          category: 'supplies',
          estimatedSpendUsd: 10,
        }),
      ),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    const allowed = results.filter((r) => r.json.decision === 'allow');
    expect(allowed).toHaveLength(10);
    expect(results.filter((r) => r.json.reasonCode === 'session_budget_exceeded')).toHaveLength(90);
    const status = await call(b!.url, 'POST', '/v1/economic/status', key(t), {
      sessionId: 'shared',
      agentId: 'agent',
    });
    expect(status.json.budget.session).toMatchObject({ limitUsd: 100, reservedUsd: 100, remainingUsd: 0 });
  });

  // Last: it stops instance A.
  it('drains on SIGTERM: open streams end, WebSockets close with 1001, the process exits 0', async () => {
    const t = await tenant();
    const sse = await SseClient.open(`${a!.url}/v1/events/stream`, key(t));
    const ws = await WsClient.open(`${a!.url.replace(/^http/, 'ws')}/ws?token=${t.token}`);
    await waitFor(() => sse.comments.includes('ok'), ':ok');
    const exited = new Promise<number | null>((r) => a!.child.once('exit', (code) => r(code)));
    a!.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    await waitFor(() => sse.ended && ws.closed, 'streams closed');
    expect(ws.closeCode).toBe(1001);
    // B still serves.
    expect((await validate(b!, t, 'after_a_left')).status).toBe(200);
  });
});
