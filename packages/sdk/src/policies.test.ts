import { describe, expect, it } from 'vitest';
import { createClient } from './client.js';
import { SvcError } from './errors.js';
import type { Http } from './http.js';
import { PolicyCache } from './policies.js';

const POLICY = { mode: 'deterministic', isActive: true, version: 1, constraints: [] };

/** A cache over a service that always answers POLICY, on a clock the test moves. */
function cacheAt(maxStalenessMs: number) {
  const clock = { now: 1_000_000 };
  const http = {
    request: async () => ({ status: 200, headers: new Headers(), body: POLICY }),
  } as unknown as Http;
  const cache = new PolicyCache(http, maxStalenessMs, () => clock.now);
  return { cache, clock };
}

describe('PolicyCache freshness', () => {
  it('counts a policy current only up to the last byte of a connected stream, plus maxStalenessMs', async () => {
    const { cache, clock } = cacheAt(5000);
    cache.connected();
    await cache.load('pay');
    clock.now += 4000;
    cache.heard(); // a heartbeat
    clock.now += 4999;
    expect(cache.fresh('pay')).toMatchObject({ kind: 'local' });
    // The stream went silent (half-open): it no longer vouches for the policy.
    clock.now += 2;
    expect(cache.fresh('pay')).toBeUndefined();
    cache.heard();
    expect(cache.fresh('pay')).toMatchObject({ kind: 'local' });
  });

  it('on a disconnect, counts the policy current until the last byte, not until the disconnect', async () => {
    const { cache, clock } = cacheAt(5000);
    cache.connected();
    await cache.load('pay');
    clock.now += 1000;
    cache.heard();
    const lastByte = clock.now;
    // Declared dead after a long silence.
    clock.now += 45_000;
    cache.disconnected();
    expect(cache.fresh('pay', lastByte + 5000)).toMatchObject({ kind: 'local' });
    expect(cache.fresh('pay')).toBeUndefined();
  });

  it('keeps a policy fetched after the last byte fresh for maxStalenessMs from its fetch', async () => {
    const { cache, clock } = cacheAt(5000);
    cache.connected();
    clock.now += 20_000; // silent since
    await cache.load('pay');
    clock.now += 5000;
    expect(cache.fresh('pay')).toMatchObject({ kind: 'local' });
    clock.now += 1;
    expect(cache.fresh('pay')).toBeUndefined();
    cache.disconnected();
    expect(cache.fresh('pay', clock.now - 1)).toMatchObject({ kind: 'local' });
  });
});

describe('PolicyCache maxPolicyAgeMs', () => {
  /** A cache on a clock the test moves, over a service answering `version` of POLICY; counts reads. */
  function agedCache(maxStalenessMs: number, maxPolicyAgeMs: number) {
    const clock = { now: 1_000_000 };
    const service = { version: 1, reads: 0 };
    const http = {
      request: async () => {
        service.reads++;
        return { status: 200, headers: new Headers(), body: { ...POLICY, version: service.version } };
      },
    } as unknown as Http;
    const cache = new PolicyCache(http, maxStalenessMs, () => clock.now, undefined, maxPolicyAgeMs);
    return { cache, clock, service };
  }

  it('uses a policy the heartbeating stream vouches for until maxPolicyAgeMs after its fetch, then not', async () => {
    const { cache, clock, service } = agedCache(1000, 10_000);
    cache.connected();
    await cache.load('pay');
    const fetchedAt = clock.now;
    // Changed on the service; the event never reaches this stream, which goes on heartbeating.
    service.version = 2;
    while (clock.now - fetchedAt < 10_000) {
      clock.now = Math.min(clock.now + 400, fetchedAt + 10_000);
      cache.heard();
      expect(cache.fresh('pay')).toMatchObject({ version: 1 });
    }
    expect(service.reads).toBe(1);
    clock.now += 1;
    cache.heard();
    expect(cache.fresh('pay')).toBeUndefined();
    expect(await cache.load('pay')).toMatchObject({ version: 2 });
    expect(cache.fresh('pay')).toMatchObject({ version: 2 });
    expect(service.reads).toBe(2);
  });

  it('counts from the fetch, not from the last byte a dropped stream vouched for', async () => {
    const { cache, clock } = agedCache(5000, 6000);
    cache.connected();
    await cache.load('pay');
    clock.now += 5000;
    cache.heard();
    clock.now += 100;
    cache.disconnected();
    // The stream's last byte keeps it current until 10000 after the fetch; its age ends it at 6000.
    clock.now += 900;
    expect(cache.fresh('pay')).toMatchObject({ kind: 'local' });
    clock.now += 1;
    expect(cache.fresh('pay')).toBeUndefined();
  });
});

describe('a policy holding fields this engine does not know', () => {
  /** What the cache makes of `policy`, answered by the service. */
  async function cachedOf(policy: Record<string, unknown>) {
    const http = {
      request: async () => ({ status: 200, headers: new Headers(), body: { ...POLICY, ...policy } }),
    } as unknown as Http;
    return new PolicyCache(http, 30_000).load('pay');
  }

  it('is decided by the service: an unknown constraint or session-limit field is not ignored', async () => {
    // A newer service enforces these; compiled here they would be dropped and the call allowed.
    expect(
      await cachedOf({ constraints: [{ argumentName: 'amount', enabled: true, multipleOf: 5 }] }),
    ).toMatchObject({ kind: 'server' });
    expect(
      await cachedOf({
        constraints: [{ argumentName: 'amount', maximum: 100 }],
        sessionConstraints: { maxCallsPerMinute: 1 },
      }),
    ).toMatchObject({ kind: 'server' });
  });

  it('is decided here when it holds only known fields, an unknown one set to null (not set) included', async () => {
    expect(
      await cachedOf({
        constraints: [{ argumentName: 'amount', maximum: 100, multipleOf: null }],
        sessionConstraints: { cumulativeLimits: [], windowMs: null },
      }),
    ).toMatchObject({ kind: 'local' });
  });
});

/** A service whose policy reads answer in the order the test releases them. */
function heldService() {
  const pending: ((version: number) => void)[] = [];
  const http = {
    request: (_method: string, _path: string) =>
      new Promise((resolve) => {
        pending.push((version) =>
          resolve({ status: 200, headers: new Headers(), body: { ...POLICY, version } }),
        );
      }),
    url: (path: string) => `http://svc.test${path}`,
  } as unknown as Http;
  return { http, pending };
}

describe('the cache’s bound', () => {
  it('caches at most maxEntries tools, dropping one not read since the others were', async () => {
    const http = {
      request: async () => ({ status: 200, headers: new Headers(), body: POLICY }),
    } as unknown as Http;
    const cache = new PolicyCache(http, 30_000, undefined, 3);
    for (const tool of ['a', 'b', 'c']) await cache.load(tool);
    expect(cache.fresh('a')).toBeDefined();
    await cache.load('d');
    expect(cache.size).toBe(3);
    expect(cache.fresh('b')).toBeUndefined();
    for (const tool of ['a', 'c', 'd']) expect(cache.fresh(tool), tool).toBeDefined();
    for (let i = 0; i < 1000; i++) await cache.load(`tool_${i}`);
    expect(cache.size).toBe(3);
  });

  it('keeps nothing for tools it does not cache: policy events for any number of tools leave no trace', async () => {
    const http = {
      request: async () => ({ status: 200, headers: new Headers(), body: POLICY }),
    } as unknown as Http;
    const cache = new PolicyCache(http, 30_000);
    cache.connected();
    await cache.load('pay');
    for (let i = 0; i < 10_000; i++) cache.changed(`tool_${i}`);
    const held = Object.values(cache)
      .filter((v): v is Map<unknown, unknown> => v instanceof Map)
      .reduce((n, m) => n + m.size, 0);
    expect(held).toBe(1); // pay's entry
    expect(cache.fresh('pay')).toMatchObject({ kind: 'local' });
  });

  it('never caches, nor lets a later call join, a fetch that a policy event made stale', async () => {
    const { http, pending } = heldService();
    const cache = new PolicyCache(http, 30_000);
    const first = cache.load('pay');
    // The policy changes while the first read is on its way: its answer may be the old policy.
    expect(cache.changed('pay')).toBe(false);
    const second = cache.load('pay');
    expect(pending).toHaveLength(2);
    // The stale read answers last: it is its caller's answer, but never the cache's.
    pending[1]!(2);
    expect(await second).toMatchObject({ version: 2 });
    pending[0]!(1);
    expect(await first).toMatchObject({ version: 1 });
    expect(cache.fresh('pay')).toMatchObject({ version: 2 });
    // The stale read ending did not forget the read under way: a third call joins it.
    cache.changed('pay');
    const third = cache.load('pay');
    const fourth = cache.load('pay');
    expect(pending).toHaveLength(3);
    pending[2]!(3);
    expect(await third).toBe(await fourth);
    expect(cache.fresh('pay')).toMatchObject({ version: 3 });
  });

  it('a stale read evicted meanwhile is still not cached', async () => {
    const { http, pending } = heldService();
    const cache = new PolicyCache(http, 30_000, undefined, 1);
    const stale = cache.load('pay');
    cache.changed('pay');
    const other = cache.load('other');
    pending[1]!(1);
    await other;
    pending[0]!(1);
    await stale;
    expect(cache.fresh('pay')).toBeUndefined();
    expect(cache.fresh('other')).toBeDefined();
  });
});

describe('createClient({ maxCachedPolicies })', () => {
  it('bounds the client’s cache', async () => {
    const reads: string[] = [];
    const client = createClient({
      apiKey: 'svc_x',
      baseUrl: 'http://svc.test',
      live: false,
      maxCachedPolicies: 2,
      fetch: async (input, init) => {
        const url = new URL(String(input));
        if (init?.method === 'GET' && url.pathname.startsWith('/v1/policies/')) {
          reads.push(url.pathname.slice('/v1/policies/'.length));
          return new Response(JSON.stringify(POLICY), { headers: { 'content-type': 'application/json' } });
        }
        return new Response(JSON.stringify({ success: true }), { status: 201 });
      },
    });
    for (const tool of ['a', 'b', 'c', 'a']) {
      expect(await client.validate(tool, {})).toMatchObject({ decision: 'allow', source: 'local' });
    }
    expect(reads).toEqual(['a', 'b', 'c', 'a']);
    await client.close();
  });
});

describe('createClient({ maxPolicyAgeMs })', () => {
  const create = (options: { maxPolicyAgeMs?: unknown; maxStalenessMs?: number }) =>
    createClient({
      apiKey: 'svc_x',
      baseUrl: 'http://svc.test',
      live: false,
      ...(options as { maxPolicyAgeMs?: number; maxStalenessMs?: number }),
    });

  it('refuses a value that is not a number of ms no less than maxStalenessMs', async () => {
    for (const options of [
      { maxPolicyAgeMs: 999, maxStalenessMs: 1000 },
      { maxPolicyAgeMs: 29_999 }, // below the default maxStalenessMs
      { maxPolicyAgeMs: -1 },
      { maxPolicyAgeMs: Number.NaN },
      { maxPolicyAgeMs: '600000' },
    ]) {
      expect(() => create(options), JSON.stringify(options)).toThrow(SvcError);
      expect(() => create(options)).toThrow(/maxPolicyAgeMs/);
    }
    // Equal to maxStalenessMs is allowed; unset, it does not refuse a maxStalenessMs over 5 minutes.
    for (const options of [
      { maxPolicyAgeMs: 1000, maxStalenessMs: 1000 },
      { maxStalenessMs: 600_000 },
      { maxPolicyAgeMs: null, maxStalenessMs: 600_000 },
    ]) {
      await create(options).close();
    }
  });
});
