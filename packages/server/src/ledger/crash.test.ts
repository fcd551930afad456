import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Checkpoint, checkCheckpoints, verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import { ADMIN_TOKEN, freshDatabase, JWT_SECRET, type TestDatabase } from '../../test/helpers.js';
import { signUserToken } from '../lib/jwt.js';
import { openStore } from '../storage/db.js';
import { migrateToLatest } from '../storage/migrate.js';

/** Starts `svc serve` on a free port and resolves with its address once it listens. */
function start(databaseUrl: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [...SVC_FLAGS, SVC_BIN, 'serve'], {
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      SVC_LOG_LEVEL: 'info',
      SVC_DATABASE_URL: databaseUrl,
      SVC_JWT_SECRET: JWT_SECRET,
      SVC_ADMIN_TOKEN: ADMIN_TOKEN,
      // Checkpoints every second, so some are signed by the process that is then killed.
      SVC_CHECKPOINT_INTERVAL: '1',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`svc did not start:\n${output.join('')}`)), 45_000);
    const onData = (chunk: Buffer) => {
      output.push(String(chunk));
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output.join(''));
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`svc exited (${code ?? signal}):\n${output.join('')}`));
    });
  });
}

async function send(base: string, method: string, path: string, headers: object, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

/** An enterprise organization without a practical rate limit, with a policy and a project key. */
async function provision(base: string): Promise<{ orgId: string; key: string }> {
  const token = await signUserToken(JWT_SECRET, 'crash-user', 3600, { jwtIssuer: null, jwtAudience: null });
  const auth = { authorization: `Bearer ${token}` };
  const org = await send(base, 'POST', '/v1/organizations', auth, { name: 'Crash', slug: 'crash' });
  expect(org.status).toBe(201);
  const tier = await send(
    base,
    'PATCH',
    `/v1/admin/organizations/${org.json._id}`,
    { authorization: `Bearer ${ADMIN_TOKEN}` },
    { tier: 'enterprise', rateLimitPerMinute: 1_000_000 },
  );
  expect(tier.status).toBe(200);
  const project = await send(base, 'POST', '/v1/projects', auth, { organizationId: org.json._id, name: 'p' });
  expect(project.status).toBe(201);
  const key = project.json.apiKey as string;
  const policy = await send(
    base,
    'POST',
    '/v1/policies',
    { 'x-service-api-key': key },
    {
      toolName: 'transfer',
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 1000 }],
    },
  );
  expect(policy.status).toBe(201);
  return { orgId: org.json._id, key };
}

/**
 * A process killed with SIGKILL while it answers validations under load: every decision it
 * acknowledged (answered 200) is in the log after a restart, the receipt chain verifies, and every
 * checkpoint signed before the kill and after the restart matches it.
 */
describe('SIGKILL under load', () => {
  let db: TestDatabase;
  let running: ChildProcess | null = null;

  beforeAll(async () => {
    db = await freshDatabase();
    const store = openStore(db.url);
    await migrateToLatest(store);
    await store.close();
  });
  afterAll(async () => {
    running?.kill('SIGKILL');
    await db.drop();
  });

  it('loses no acknowledged decision and leaves a chain that verifies', async () => {
    const first = await start(db.url);
    running = first.child;
    const { orgId, key } = await provision(first.url);
    const acknowledged: string[] = [];
    let stop = false;
    const worker = async (w: number) => {
      for (let i = 0; !stop; i++) {
        try {
          const res = await send(
            first.url,
            'POST',
            '/v1/tools/validate',
            { 'x-service-api-key': key },
            {
              tool_name: 'transfer',
              arguments: { amount: (w * 997 + i) % 1500 },
            },
          );
          if (res.status === 200) acknowledged.push(res.json.metadata.decision_id);
        } catch {
          // The connection died with the process: not acknowledged.
        }
      }
    };
    const load = Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
    // Kill mid-load, once a good number of decisions has been answered and a checkpoint signed.
    const deadline = Date.now() + 20_000;
    const signed = async () =>
      (await send(first.url, 'GET', '/v1/receipts/checkpoints/latest', { 'x-service-api-key': key }))
        .status === 200;
    while ((acknowledged.length < 300 || !(await signed())) && Date.now() < deadline) await sleep(50);
    const exited = new Promise((r) => first.child.once('exit', r));
    first.child.kill('SIGKILL');
    await exited;
    stop = true;
    await load;
    expect(acknowledged.length).toBeGreaterThanOrEqual(300);

    // Restart on the same database: the chain continues from what was committed.
    const second = await start(db.url);
    running = second.child;
    const after = await send(
      second.url,
      'POST',
      '/v1/tools/validate',
      { 'x-service-api-key': key },
      {
        tool_name: 'transfer',
        arguments: { amount: 1 },
      },
    );
    expect(after.status).toBe(200);
    const store = openStore(db.url);
    try {
      const ids = new Set(
        (
          await store.db.selectFrom('decisions').select('id').where('organization_id', '=', orgId).execute()
        ).map((r) => r.id),
      );
      const missing = acknowledged.filter((id) => !ids.has(id));
      expect(missing).toEqual([]);
      expect(ids.has(after.json.metadata.decision_id)).toBe(true);
      const chain = await store.db
        .selectFrom('receipts')
        .select('payload')
        .where('organization_id', '=', orgId)
        .orderBy('sequence')
        .execute();
      // Checkpoints signed before the kill, and after the restart, all match the recovered chain.
      await send(second.url, 'POST', '/v1/receipts/checkpoints', { 'x-service-api-key': key });
      const checkpoints = (
        await send(second.url, 'GET', '/v1/receipts/checkpoints?limit=100', { 'x-service-api-key': key })
      ).json.data as Checkpoint[];
      const keys = (await send(second.url, 'GET', '/.well-known/svc-keys.json', {})).json.keys;
      const report = await verifyReceipts(
        chain.map((r) => r.payload),
        { treeSizes: checkpoints.map((c) => c.tree_size) },
      );
      const results = await checkCheckpoints(checkpoints, keys, report);
      expect(results.filter((r) => r.status !== 'ok')).toEqual([]);
      expect(checkpoints.some((c) => c.tree_size < chain.length)).toBe(true);
      expect(checkpoints[0]!.tree_size).toBe(chain.length);
      expect(report.errors).toEqual([]);
      expect(report.ok).toBe(true);
      expect(report.count).toBe(chain.length);
      expect(chain.length).toBeGreaterThanOrEqual(acknowledged.length + 1);
    } finally {
      await store.close();
      const exited2 = new Promise((r) => second.child.once('exit', r));
      second.child.kill('SIGTERM');
      await exited2;
      running = null;
    }
  }, 120_000);
});
