import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL } from '../../test/streams.js';
import { MemoryRateLimiter, type RateLimiter, RedisRateLimiter } from './rate-limit.js';

const WINDOW = 60_000;
const T0 = 1_700_000_080_000; // 40 s into a minute window

describe('RedisRateLimiter', () => {
  let redis: Redis;
  let prefix: string;
  beforeAll(async () => {
    redis = new Redis(TEST_REDIS_URL);
    prefix = redisPrefix();
  });
  afterAll(async () => {
    await redis.quit();
    await dropRedisKeys(prefix);
  });

  async function run(limiter: RateLimiter, bucket: string) {
    const out = [];
    // 5 in the window with a limit of 3, then the next window, then a lowered limit.
    for (let i = 0; i < 5; i++) out.push(await limiter.hit(bucket, 3, WINDOW, T0 + i));
    out.push(await limiter.hit(bucket, 3, WINDOW, T0 + 20_000));
    out.push(await limiter.hit(bucket, 3, WINDOW, T0 + 20_001));
    out.push(await limiter.hit(bucket, 1, WINDOW, T0 + 20_002));
    return out;
  }

  it('answers exactly as the in-memory limiter', async () => {
    const memory = await run(new MemoryRateLimiter(), 'k');
    const shared = await run(new RedisRateLimiter(redis, prefix), 'k');
    expect(shared).toEqual(memory);
    expect(memory.map((r) => r.allowed)).toEqual([true, true, true, false, false, true, true, false]);
    expect(memory[0]).toEqual({
      allowed: true,
      limit: 3,
      remaining: 2,
      resetAt: (T0 - 40_000 + WINDOW) / 1000,
    });
    expect(memory[3]!.remaining).toBe(0);
  });

  it('shares one window between limiters (instances) and counts atomically', async () => {
    const a = new RedisRateLimiter(redis, prefix);
    const b = new RedisRateLimiter(redis, prefix);
    const hits = await Promise.all(
      Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).hit('shared', 60, WINDOW, T0 + i)),
    );
    expect(hits.filter((h) => h.allowed)).toHaveLength(60);
    const counts = hits
      .filter((h) => h.allowed)
      .map((h) => h.remaining)
      .sort((x, y) => x - y);
    expect(counts).toEqual(Array.from({ length: 60 }, (_, i) => i));
  });

  it('lets the window key expire after the window', async () => {
    await new RedisRateLimiter(redis, prefix).hit('ttl', 5, WINDOW, T0);
    const ttl = await redis.pttl(`${prefix}rl:ttl:${T0 - 40_000}`);
    expect(ttl).toBeGreaterThan(WINDOW);
    expect(ttl).toBeLessThanOrEqual(WINDOW + 1000);
  });

  it('fails closed with 503 when Redis does not answer', async () => {
    const dead = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    dead.on('error', () => {});
    await expect(new RedisRateLimiter(dead, prefix).hit('x', 5, WINDOW, T0)).rejects.toMatchObject({
      code: 'service_unavailable',
    });
    dead.disconnect();
  });
});
