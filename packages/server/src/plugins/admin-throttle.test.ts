import { describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, bearer, expectError, withTestApp } from '../../test/helpers.js';
import type { Clock } from '../lib/clock.js';
import { AdminAuthThrottle } from './admin-throttle.js';

const T0 = 1_700_000_000_000;

describe('AdminAuthThrottle', () => {
  it('blocks an address once it spent its budget of refusals, until its window ends', () => {
    const throttle = new AdminAuthThrottle({ limit: 3, windowMs: 60_000 });
    for (let i = 0; i < 3; i++) {
      expect(throttle.blockedFor('10.0.0.1', T0 + i)).toBe(0);
      throttle.refused('10.0.0.1', T0 + i);
    }
    // The window opened at the first refusal (T0) and ends at T0 + 60 s.
    expect(throttle.blockedFor('10.0.0.1', T0 + 1000)).toBe(59_000);
    expect(throttle.blockedFor('10.0.0.2', T0 + 1000)).toBe(0);
    expect(throttle.blockedFor('10.0.0.1', T0 + 59_999)).toBe(1);
    expect(throttle.blockedFor('10.0.0.1', T0 + 60_000)).toBe(0);
    // A refusal after the window opens a new one, with a full budget.
    throttle.refused('10.0.0.1', T0 + 60_000);
    expect(throttle.blockedFor('10.0.0.1', T0 + 60_001)).toBe(0);
  });

  it('throws 429 rate_limit_exceeded with Retry-After in whole seconds, at least 1', () => {
    const throttle = new AdminAuthThrottle({ limit: 1, windowMs: 60_000 });
    expect(() => throttle.check('a', T0)).not.toThrow();
    throttle.refused('a', T0);
    expect(() => throttle.check('a', T0 + 500)).toThrow(
      expect.objectContaining({ status: 429, code: 'rate_limit_exceeded', headers: { 'retry-after': '60' } }),
    );
    expect(() => throttle.check('a', T0 + 59_900)).toThrow(
      expect.objectContaining({ headers: { 'retry-after': '1' } }),
    );
    expect(() => throttle.check('a', T0 + 60_000)).not.toThrow();
  });

  it('remembers at most maxEntries addresses: ended windows go first, then the oldest', () => {
    const throttle = new AdminAuthThrottle({ limit: 1, windowMs: 1000, maxEntries: 3 });
    throttle.refused('a', T0);
    throttle.refused('b', T0 + 500);
    throttle.refused('c', T0 + 600);
    expect(throttle.size).toBe(3);
    // a's window ended: dropped instead of evicting a live one.
    throttle.refused('d', T0 + 1000);
    expect(throttle.size).toBe(3);
    expect(throttle.blockedFor('b', T0 + 1000)).toBeGreaterThan(0);
    // Full of live windows: the oldest (b) is evicted.
    throttle.refused('e', T0 + 1001);
    expect(throttle.size).toBe(3);
    expect(throttle.blockedFor('b', T0 + 1001)).toBe(0);
    expect(throttle.blockedFor('c', T0 + 1001)).toBeGreaterThan(0);
    // A flood of addresses never grows the map past its bound.
    for (let i = 0; i < 1000; i++) throttle.refused(`flood-${i}`, T0 + 1002);
    expect(throttle.size).toBe(3);
  });

  it('moves an address whose window reopens to the newest place', () => {
    const throttle = new AdminAuthThrottle({ limit: 1, windowMs: 1000, maxEntries: 2 });
    throttle.refused('a', T0);
    throttle.refused('b', T0 + 900);
    throttle.refused('a', T0 + 1000); // a new window for a: now b is the oldest
    throttle.refused('c', T0 + 1001);
    expect(throttle.blockedFor('a', T0 + 1001)).toBeGreaterThan(0);
    expect(throttle.blockedFor('b', T0 + 1001)).toBe(0);
  });
});

describe('admin routes: refused admin tokens per client address', () => {
  it('answers 429 with Retry-After past 10 refusals per minute, even to the right token, per address', async () => {
    let now = Date.parse('2026-11-21T12:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    await withTestApp({}, { clock }, async (t) => {
      const attacker = '203.0.113.7';
      const admin = (remoteAddress: string, token: string, url = '/metrics') =>
        t.inject({ method: 'GET', url, headers: bearer(token), remoteAddress });
      for (let i = 0; i < 10; i++) {
        expectError(await admin(attacker, `wrong-token-${i}-padding`), 401, 'unauthorized');
        now += 1000;
      }
      // The 11th, 10 s into the window: blocked for the remaining 50 s, on every admin route.
      for (const [token, url] of [
        ['wrong-token-x-padding', '/metrics'],
        [ADMIN_TOKEN, '/metrics'],
        [ADMIN_TOKEN, '/v1/admin/signing-keys'],
      ] as const) {
        const res = await admin(attacker, token, url);
        expectError(res, 429, 'rate_limit_exceeded');
        expect(res.headers['retry-after'], url).toBe('50');
      }
      // Another address is not concerned; a success resets nothing.
      expect((await admin('198.51.100.1', ADMIN_TOKEN)).statusCode).toBe(200);
      // Routes for users and API keys are not concerned either.
      expect((await t.inject({ method: 'GET', url: '/healthz', remoteAddress: attacker })).statusCode).toBe(
        200,
      );
      now += 49_000;
      expect((await admin(attacker, ADMIN_TOKEN)).headers['retry-after']).toBe('1');
      // The window ended: answered again, with a fresh budget.
      now += 1000;
      expect((await admin(attacker, ADMIN_TOKEN)).statusCode).toBe(200);
      expectError(await admin(attacker, 'wrong-again-padding'), 401, 'unauthorized');
      // The API document lists that 429 on the admin operations.
      const doc = (await t.inject({ method: 'GET', url: '/openapi.json' })).json();
      for (const [path, method] of [
        ['/metrics', 'get'],
        ['/v1/admin/signing-keys', 'get'],
        ['/v1/admin/organizations/{id}', 'patch'],
      ] as const) {
        const tooMany = doc.paths[path][method].responses['429'];
        expect(tooMany.description, path).toContain('refused admin authentications');
        expect(tooMany.headers['Retry-After'], path).toBeDefined();
      }
    });
  });
});
