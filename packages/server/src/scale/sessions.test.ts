import type { SessionConstraints } from '@svc/policy-engine';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/helpers.js';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL } from '../../test/streams.js';
import { MemorySessionCounters, type SessionCounters } from '../enforcement/session-counters.js';
import { createOrganizationRepository } from '../modules/organizations/repository.js';
import { openStore, type Store } from '../storage/db.js';
import { migrateToLatest } from '../storage/migrate.js';
import { evictionWarning, RedisSessionCounters } from './sessions.js';

const quiet = { warn() {}, error() {}, info() {} };
const ORG = 'org-sessions';

type Step =
  | { args: Record<string, unknown>; sc?: SessionConstraints; release?: true }
  | { session: string; args: Record<string, unknown>; sc?: SessionConstraints };

const limits: SessionConstraints = {
  maxCalls: 6,
  cumulativeLimits: [
    { argumentName: 'amount', maxValue: 0.3 },
    { argumentName: 'tokens', maxValue: 100 },
  ],
};

// Exercises every rule: float tolerance at the limit, just over it, type and range failures (which
// still report the current totals), absent arguments, the call limit, and a released reservation.
const STEPS: Step[] = [
  { args: { amount: 0.1 } },
  { args: { amount: 0.2, tokens: 40 } }, // 0.30000000000000004: on the limit within tolerance
  { args: { amount: 1e-10 } }, // over by 1e-10, still within 1e-9 * 0.3
  { args: { amount: 0.01 } }, // clearly over
  { args: { amount: 'ten' } },
  { args: { amount: -1, tokens: 10 } },
  { args: { tokens: 60 } }, // exactly 100
  { args: { tokens: 1 }, release: true }, // refused anyway: over 100
  { args: {}, release: true }, // counted, then given back
  { args: {} },
  { args: {} },
  { args: {} }, // the 7th call: over maxCalls 6
  {
    args: { tokens: 0 },
    sc: { maxCalls: 100, cumulativeLimits: [{ argumentName: 'tokens', maxValue: 100 }] },
  },
  // The tolerance is relative only: under a limit of 0 any positive total is over.
  { args: { dust: 1e-12 }, sc: { maxCalls: 100, cumulativeLimits: [{ argumentName: 'dust', maxValue: 0 }] } },
];

async function run(counters: SessionCounters, session: string) {
  const out = [];
  for (const step of STEPS) {
    const r = await counters.reserve(ORG, session, 'pay', step.sc ?? limits, step.args);
    out.push({ failures: r.failures, after: r.after });
    if ('release' in step && step.release) r.release();
    else r.settle();
  }
  return out;
}

describe('RedisSessionCounters', () => {
  let db: TestDatabase;
  let store: Store;
  let redis: Redis;
  const prefix = redisPrefix();

  beforeAll(async () => {
    db = await freshDatabase();
    store = openStore(db.url);
    await migrateToLatest(store);
    const now = new Date().toISOString();
    await createOrganizationRepository(store.db).create({
      id: ORG,
      name: 'Sessions',
      slug: `sessions-${Date.now()}`,
      owner_id: 'u',
      tier: 'free',
      rate_limit_per_minute: null,
      billing_period_start: null,
      created_at: now,
      updated_at: null,
    });
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    await redis.quit();
    await dropRedisKeys(prefix);
    await store.close();
    await db.drop();
  });

  it('decides, reports and counts exactly as the in-memory counters', async () => {
    const memory = await run(new MemorySessionCounters(store), 's-parity');
    const shared = await run(new RedisSessionCounters(redis, prefix, store, quiet), 's-parity');
    expect(shared).toEqual(memory);
    // The sequence really hits each rule.
    expect(memory.map((s) => s.failures.map((f) => f.constraint_type).join('+'))).toEqual([
      '',
      '',
      '',
      'cumulative_limit',
      'type',
      'range',
      '',
      'cumulative_limit',
      '',
      '',
      '',
      'max_calls',
      '',
      'cumulative_limit',
    ]);
  });

  it('counts an argument named like an Object.prototype member as any other, in both counters', async () => {
    const sc = { maxCalls: 100, cumulativeLimits: [{ argumentName: 'constructor', maxValue: 10 }] };
    for (const counters of [
      new MemorySessionCounters(store),
      new RedisSessionCounters(redis, prefix, store, quiet),
    ]) {
      const session = `s-inherited-${counters.constructor.name}`;
      const reserve = async (value: number, release = false) => {
        const r = await counters.reserve(ORG, session, 'pay', sc, { constructor: value });
        if (release) r.release();
        else r.settle();
        return r;
      };
      // A call without the argument, and one with a value that cannot be counted, as with any name.
      const without = await counters.reserve(ORG, session, 'pay', sc, {});
      without.release();
      expect(without.failures).toEqual([]);
      expect(
        (await counters.reserve(ORG, session, 'pay', sc, { constructor: 'ten' })).failures.map(
          (f) => f.constraint_type,
        ),
      ).toEqual(['type']);
      expect((await reserve(6)).after).toEqual({ calls: 1, cumulative: { constructor: 6 } });
      expect((await reserve(6)).failures.map((f) => f.constraint_type)).toEqual(['cumulative_limit']);
      // Counted, then given back: the total is 6 again, not a string or NaN.
      expect((await reserve(1, true)).failures).toEqual([]);
      const last = await reserve(3);
      expect(last.failures).toEqual([]);
      expect(last.after).toEqual({ calls: 2, cumulative: { constructor: 9 } });
    }
  });

  it('checks a call without counting it, from Redis or from the stored totals, as the in-memory counters do', async () => {
    const sc = { maxCalls: 2, cumulativeLimits: [{ argumentName: 'usd', maxValue: 10 }] };
    await store.db
      .insertInto('session_counters')
      .values({
        organization_id: ORG,
        session_id: 's-check',
        tool_name: 'pay',
        calls: 1,
        cumulative: JSON.stringify({ usd: 6 }),
        updated_at: new Date().toISOString(),
      })
      .execute();
    const kinds = (f: { constraint_type: string }[]) => f.map((x) => x.constraint_type);
    for (const counters of [
      new MemorySessionCounters(store),
      new RedisSessionCounters(redis, prefix, store, quiet),
    ]) {
      // Not in Redis yet: the stored totals.
      expect(kinds(await counters.check(ORG, 's-check', 'pay', sc, { usd: 5 }))).toEqual([
        'cumulative_limit',
      ]);
      expect(await counters.check(ORG, 's-check', 'pay', sc, { usd: 4 })).toEqual([]);
      // Checked twice, counted never: one call still fits.
      expect(await counters.check(ORG, 's-check', 'pay', sc, { usd: 4 })).toEqual([]);
    }
    const redisCounters = new RedisSessionCounters(redis, prefix, store, quiet);
    (await redisCounters.reserve(ORG, 's-check', 'pay', sc, { usd: 1 })).settle();
    // In Redis now: 2 calls and 7 spent.
    expect(kinds(await redisCounters.check(ORG, 's-check', 'pay', sc, { usd: 4 }))).toEqual([
      'max_calls',
      'cumulative_limit',
    ]);
  });

  it('starts from the stored totals of a session not yet in Redis', async () => {
    await store.db
      .insertInto('session_counters')
      .values({
        organization_id: ORG,
        session_id: 's-stored',
        tool_name: 'pay',
        calls: 5,
        cumulative: JSON.stringify({ amount: 0.25, other: 7 }),
        updated_at: new Date().toISOString(),
      })
      .execute();
    const counters = new RedisSessionCounters(redis, prefix, store, quiet);
    const first = await counters.reserve(ORG, 's-stored', 'pay', limits, { amount: 0.05 });
    expect(first.failures).toEqual([]);
    expect(first.after).toEqual({ calls: 6, cumulative: { amount: 0.3, other: 7 } });
    const second = await counters.reserve(ORG, 's-stored', 'pay', limits, {});
    expect(second.failures.map((f) => f.constraint_type)).toEqual(['max_calls']);
  });

  it('never lets two instances take the same slot', async () => {
    const second = new Redis(TEST_REDIS_URL);
    const a = new RedisSessionCounters(redis, prefix, store, quiet);
    const b = new RedisSessionCounters(second, prefix, store, quiet);
    const sc = { maxCalls: 10 };
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).reserve(ORG, 's-race', 'pay', sc, {})),
    );
    const allowed = results.filter((r) => r.failures.length === 0);
    expect(allowed).toHaveLength(10);
    expect(allowed.map((r) => r.after!.calls).sort((x, y) => x - y)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    await second.quit();
  });

  it('gives a released call back to every instance', async () => {
    const second = new Redis(TEST_REDIS_URL);
    const a = new RedisSessionCounters(redis, prefix, store, quiet);
    const b = new RedisSessionCounters(second, prefix, store, quiet);
    const sc = { maxCalls: 1, cumulativeLimits: [{ argumentName: 'usd', maxValue: 1 }] };
    const r = await a.reserve(ORG, 's-release', 'pay', sc, { usd: 0.7 });
    expect(r.failures).toEqual([]);
    expect((await b.reserve(ORG, 's-release', 'pay', sc, { usd: 0.1 })).failures).toHaveLength(1);
    r.release();
    // The release is sent before this call on the same connection, so it is applied first.
    const again = await a.reserve(ORG, 's-release', 'pay', sc, { usd: 0.9 });
    expect(again.failures).toEqual([]);
    expect(again.after).toEqual({ calls: 1, cumulative: { usd: 0.9 } });
    expect((await b.reserve(ORG, 's-release', 'pay', sc, {})).failures).toHaveLength(1);
    await second.quit();
  });
});

describe('evictionWarning', () => {
  it('warns under every maxmemory-policy that can evict a session counter', () => {
    expect(evictionWarning('noeviction')).toBeNull();
    expect(evictionWarning(null)).toBeNull();
    for (const policy of ['allkeys-lru', 'volatile-lru', 'volatile-ttl', 'allkeys-random']) {
      expect(evictionWarning(policy)).toContain(`maxmemory-policy is ${policy}`);
    }
  });
});
