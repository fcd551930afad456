import { describe, expect, it } from 'vitest';
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
