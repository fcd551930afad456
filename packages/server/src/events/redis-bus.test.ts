import { afterEach, describe, expect, it } from 'vitest';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL, waitFor } from '../../test/streams.js';
import { RedisLink } from '../scale/redis.js';
import type { ServiceEvent } from './bus.js';
import { RedisEventBus } from './redis-bus.js';

const quiet = { warn() {}, error() {}, info() {} };

describe('RedisEventBus', () => {
  const links: RedisLink[] = [];
  let prefix = '';
  const instance = async () => {
    const link = await RedisLink.connect(TEST_REDIS_URL, prefix, quiet);
    links.push(link);
    const bus = await RedisEventBus.create(link, quiet);
    const seen: ServiceEvent[] = [];
    bus.subscribe((e) => seen.push(e));
    return { bus, seen };
  };

  afterEach(async () => {
    await Promise.all(links.splice(0).map((l) => l.close()));
    await dropRedisKeys(prefix);
  });

  it('delivers every event once on every instance, the publisher included', async () => {
    prefix = redisPrefix();
    const a = await instance();
    const b = await instance();
    const c = await instance();
    a.bus.publish({ organizationId: 'o1', type: 'one', data: { n: 1 } });
    b.bus.publish({ organizationId: 'o2', type: 'two', data: { n: 2 } });
    // The publisher delivers locally at once, before Redis is involved.
    expect(a.seen.map((e) => e.type)).toEqual(['one']);
    for (const x of [a, b, c]) await waitFor(() => x.seen.length === 2, 'both events');
    // A marker published last: once it arrived, any duplicate of the earlier events would have too.
    c.bus.publish({ organizationId: 'o3', type: 'marker', data: {} });
    for (const x of [a, b, c]) await waitFor(() => x.seen.some((e) => e.type === 'marker'), 'marker');
    for (const x of [a, b, c]) {
      expect(x.seen.map((e) => e.type).sort()).toEqual(['marker', 'one', 'two']);
    }
    expect(b.seen.find((e) => e.type === 'one')).toEqual({
      organizationId: 'o1',
      type: 'one',
      data: { n: 1 },
    });
  });

  it('keeps other deployments apart through the key prefix', async () => {
    prefix = redisPrefix();
    const a = await instance();
    prefix = redisPrefix();
    const other = await instance();
    const b = await instance();
    a.bus.publish({ organizationId: 'o', type: 'private', data: {} });
    b.bus.publish({ organizationId: 'o', type: 'marker', data: {} });
    await waitFor(() => other.seen.some((e) => e.type === 'marker'), 'marker');
    expect(other.seen.map((e) => e.type)).toEqual(['marker']);
  });
});
