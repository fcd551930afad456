import Fastify, { type InjectOptions } from 'fastify';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  createTenant,
  createTestApp,
  freshDatabase,
  JWT_SECRET,
  keyHeader,
  TEST_PG_URL,
  type TestApp,
  type TestDatabase,
} from '../../../test/helpers.js';
import { PausingProxy } from '../../../test/pausing-proxy.js';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL, waitFor } from '../../../test/streams.js';
import { buildApp } from '../../app.js';
import { loadConfig } from '../../config.js';
import { signUserToken } from '../../lib/jwt.js';
import type { RedisLink } from '../../scale/redis.js';
import { openStore, type Store } from '../../storage/db.js';
import { migrateToLatest } from '../../storage/migrate.js';
import { healthRoutes, READY_TIMEOUT_MS } from './routes.js';

/** How long `run` took, in ms, and what it gave. */
async function timed<T>(run: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  const value = await run();
  return { ms: performance.now() - started, value };
}

const never = () => new Promise<void>(() => {});

describe('GET /readyz deadlines', () => {
  const ready = async (
    store: () => Promise<void>,
    redis: (() => Promise<void>) | null,
    readyTimeoutMs = 100,
  ) => {
    const app = Fastify();
    await app.register(healthRoutes, {
      ctx: {
        store: { ping: store } as unknown as Store,
        redis: redis ? ({ ping: redis } as unknown as RedisLink) : null,
      },
      readyTimeoutMs,
    });
    try {
      return await timed(() => app.inject({ method: 'GET', url: '/readyz' }));
    } finally {
      await app.close();
    }
  };

  it('answers 503 once the store has not answered within the deadline', async () => {
    const { ms, value } = await ready(never, async () => {});
    expect(value.statusCode).toBe(503);
    expect(value.json().error.message).toBe('The store is not answering');
    expect(ms).toBeLessThan(1000);
  });

  it('answers 503 once Redis has not answered within the deadline', async () => {
    const { ms, value } = await ready(async () => {}, never);
    expect(value.statusCode).toBe(503);
    expect(value.json().error.message).toBe('Redis is not answering');
    expect(ms).toBeLessThan(1000);
  });

  it('checks both at once: one deadline for the answer, not one per dependency', async () => {
    // Each check answers only once the other has started: one after the other, the first would
    // wait for the deadline.
    let storeStarted = () => {};
    let redisStarted = () => {};
    const storeGo = new Promise<void>((r) => (storeStarted = r));
    const redisGo = new Promise<void>((r) => (redisStarted = r));
    const store = () => {
      storeStarted();
      return redisGo;
    };
    const redis = () => {
      redisStarted();
      return storeGo;
    };
    expect((await ready(store, redis, 2000)).value.statusCode).toBe(200);
    const down = await ready(never, never, 1000);
    expect(down.value.json().error.message).toBe('The store is not answering');
    expect(down.ms).toBeLessThan(2000);
  });

  it('gives each check 2 s by default', () => {
    expect(READY_TIMEOUT_MS).toBe(2000);
  });
});

describe.runIf(!TEST_PG_URL)('GET /readyz on the embedded store', () => {
  it('answers 503 while the database file cannot be written', async () => {
    const t = await createTestApp();
    try {
      expect((await t.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
      // The connection refuses writes from now on, as it would on a file remounted read-only.
      t.store.sqlite!.pragma('query_only = ON');
      const res = await t.inject({ method: 'GET', url: '/readyz' });
      expect(res.statusCode).toBe(503);
      expect(res.json().error.message).toBe('The store is not answering');
      t.store.sqlite!.pragma('query_only = OFF');
      expect((await t.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    } finally {
      await t.close();
    }
  });
});

const validate = (t: Pick<TestApp, 'inject'>, apiKey: string) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(apiKey),
    payload: { tool_name: 'pay', arguments: { amount: 1 } },
  });

describe('while the network to Redis is cut', () => {
  const prefix = redisPrefix();
  let proxy: PausingProxy;
  let t: TestApp;
  afterAll(async () => {
    proxy?.resume();
    await t?.close();
    await proxy?.close();
    await dropRedisKeys(prefix);
  });

  it('fails validations closed (503) and readiness (503) within seconds, and recovers', async () => {
    proxy = await PausingProxy.start(Number(new URL(TEST_REDIS_URL).port || 6379));
    t = await createTestApp({ redisUrl: proxy.url(TEST_REDIS_URL), redisPrefix: prefix });
    const tenant = await createTenant(t);
    expect((await validate(t, tenant.apiKey)).statusCode).toBe(200);
    expect((await t.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    proxy.pause();
    const [readyz, validated] = await Promise.all([
      timed(() => t.inject({ method: 'GET', url: '/readyz' })),
      timed(() => validate(t, tenant.apiKey)),
    ]);
    expect(readyz.value.statusCode).toBe(503);
    expect(readyz.value.json().error.message).toBe('Redis is not answering');
    expect(readyz.ms).toBeLessThan(READY_TIMEOUT_MS + 1000);
    expect(validated.value.statusCode).toBe(503);
    expect(validated.value.json().error.code).toBe('service_unavailable');
    // The command timeout (2 s), not the partition.
    expect(validated.ms).toBeLessThan(4000);
    proxy.resume();
    await waitFor(
      async () => (await t.inject({ method: 'GET', url: '/readyz' })).statusCode === 200,
      'ready again',
    );
    await waitFor(async () => (await validate(t, tenant.apiKey)).statusCode === 200, 'validating again');
  });
});

describe.runIf(TEST_PG_URL)('while the network to PostgreSQL is cut', () => {
  let database: TestDatabase | null = null;
  let proxy: PausingProxy | null = null;
  let store: Store | null = null;
  let close: (() => Promise<void>) | null = null;
  afterEach(async () => {
    proxy?.resume();
    await close?.();
    await store?.close();
    await proxy?.close();
    await database?.drop();
    database = proxy = store = close = null;
  });

  it('fails validations with 503 within the store timeouts, never answering an unrecorded decision', async () => {
    database = await freshDatabase();
    proxy = await PausingProxy.start(Number(new URL(TEST_PG_URL!).port || 5432));
    store = openStore(proxy.url(database.url), {
      purpose: 'serve',
      timeouts: { connectMs: 400, statementMs: 300, queryMs: 400, closeMs: 300 },
    });
    await migrateToLatest(store);
    const config = {
      ...loadConfig({}),
      jwtSecret: JWT_SECRET,
      adminToken: ADMIN_TOKEN,
      databaseUrl: database.url,
      logLevel: 'silent' as const,
    };
    const { app } = await buildApp({ config, store, logger: false });
    close = () => app.close();
    const t = {
      inject: (o: InjectOptions) => app.inject(o),
      token: (user: string) => signUserToken(JWT_SECRET, user, 3600, config),
    } as unknown as TestApp;
    const tenant = await createTenant(t);
    const answered: string[] = [];
    const first = await validate(t, tenant.apiKey);
    expect(first.statusCode).toBe(200);
    answered.push(first.json().metadata.decision_id);

    proxy.pause();
    const during = await Promise.all(
      Array.from({ length: 3 }, () => timed(() => validate(t, tenant.apiKey))),
    );
    const readyz = await timed(() => t.inject({ method: 'GET', url: '/readyz' }));
    expect(readyz.value.statusCode).toBe(503);
    expect(readyz.value.json().error.message).toBe('The store is not answering');
    expect(readyz.ms).toBeLessThan(READY_TIMEOUT_MS + 1000);
    for (const { ms, value } of during) {
      // Failed closed, as a retry: never an answer for a decision whose commit did not complete.
      expect(value.statusCode).toBe(503);
      expect(value.json().error.code).toBe('service_unavailable');
      // A batch the store did not answer fails as a whole, with what was queued behind it.
      expect(ms).toBeLessThan(5000);
    }

    proxy.resume();
    await waitFor(
      async () => (await t.inject({ method: 'GET', url: '/readyz' })).statusCode === 200,
      'ready',
    );
    const after = await validate(t, tenant.apiKey);
    expect(after.statusCode).toBe(200);
    answered.push(after.json().metadata.decision_id);
    // Every decision answered is recorded, and the chain has no gap.
    const direct = openStore(database.url);
    try {
      const ids = (await direct.db.selectFrom('decisions').select('id').execute()).map((r) => r.id);
      for (const id of answered) expect(ids).toContain(id);
      const sequences = (
        await direct.db
          .selectFrom('receipts')
          .select('sequence')
          .where('organization_id', '=', tenant.orgId)
          .orderBy('sequence')
          .execute()
      ).map((r) => Number(r.sequence));
      expect(sequences).toEqual(sequences.map((_, i) => i));
      expect(sequences.length).toBe(ids.length);
    } finally {
      await direct.close();
    }
  });
});
