import { describe, expect, it } from 'vitest';
import { ManualClock, openApproval, setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { bearer, createTenant, expectError, withTestApp } from '../../../test/helpers.js';
import { SESSION_COOKIE } from './model.js';
import { sessionKey } from './service.js';

const clock = new ManualClock();

const t = useTestApp({}, { clock });

/** Redeems a fresh link for `userId`; the cookie header value and the session's CSRF token. */
async function signIn(userId: string): Promise<{ cookie: string; csrf: string }> {
  const link = await t.ctx.sessions.createLoginLink(userId, 900);
  const res = await t.inject({ method: 'GET', url: new URL(link.url).pathname + new URL(link.url).search });
  expect(res.statusCode).toBe(303);
  expect(res.headers.location).toBe('/');
  const setCookie = String(res.headers['set-cookie']);
  const cookie = setCookie.split(';')[0]!;
  const session = await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie } });
  expect(session.statusCode).toBe(200);
  return { cookie, csrf: session.json().csrfToken };
}

describe('login links', () => {
  it('are made only for an id a token could carry too', async () => {
    for (const userId of ['', '   ', 'a\u0000b', 'tab\there', 'x'.repeat(201)]) {
      await expect(t.ctx.sessions.createLoginLink(userId, 900), JSON.stringify(userId)).rejects.toThrow(
        /1 to 200 characters without control characters/,
      );
    }
  });

  it('open a session once, with an HttpOnly SameSite=Lax cookie', async () => {
    const link = await t.ctx.sessions.createLoginLink('alice', 900);
    expect(link.url).toMatch(/^http:\/\/[^/]+\/v1\/auth\/login\?token=[A-Za-z0-9_-]{43}$/);
    const url = new URL(link.url);
    const first = await t.inject({ method: 'GET', url: url.pathname + url.search });
    expect(first.statusCode).toBe(303);
    const setCookie = String(first.headers['set-cookie']);
    expect(setCookie).toMatch(
      new RegExp(`^${SESSION_COOKIE}=[A-Za-z0-9_-]{43}; Path=/; Max-Age=43200; HttpOnly; SameSite=Lax$`),
    );
    const again = await t.inject({ method: 'GET', url: url.pathname + url.search });
    expect(again.statusCode).toBe(303);
    expect(again.headers.location).toBe('/?signin=invalid');
    expect(again.headers['set-cookie']).toBeUndefined();
  });

  it('expire after their TTL, and garbage tokens are refused', async () => {
    const link = await t.ctx.sessions.createLoginLink('alice', 60);
    clock.advance(61);
    const url = new URL(link.url);
    const res = await t.inject({ method: 'GET', url: url.pathname + url.search });
    expect(res.headers.location).toBe('/?signin=invalid');
    const bad = await t.inject({ method: 'GET', url: '/v1/auth/login?token=nope' });
    expect(bad.headers.location).toBe('/?signin=invalid');
    // A link cut short, too long, repeated or mistyped is followed in a browser too: a page, not JSON.
    for (const query of ['', '?token=', `?token=${'a'.repeat(300)}`, '?token=a&token=b', '?tok=x']) {
      const res = await t.inject({ method: 'GET', url: `/v1/auth/login${query}` });
      expect(res.statusCode, query).toBe(303);
      expect(res.headers.location, query).toBe('/?signin=invalid');
    }
  });

  it('mark the cookie Secure when the service is reached over HTTPS', async () => {
    await withTestApp({ baseUrl: 'https://svc.example' }, async (s) => {
      const link = await s.ctx.sessions.createLoginLink('alice', 900);
      expect(link.url.startsWith('https://svc.example/v1/auth/login?token=')).toBe(true);
      const url = new URL(link.url);
      const res = await s.inject({ method: 'GET', url: url.pathname + url.search });
      expect(String(res.headers['set-cookie'])).toMatch(/; Secure$/);
    });
  });
});

describe('cookie sessions', () => {
  it('act as the user: organizations, reads, and writes with the CSRF token', async () => {
    const tenant = await createTenant(t);
    const { cookie, csrf } = await signIn(tenant.userId);
    const orgs = await t.inject({ method: 'GET', url: '/v1/organizations', headers: { cookie } });
    expect(orgs.statusCode).toBe(200);
    expect(orgs.json().data.map((o: { _id: string }) => o._id)).toEqual([tenant.orgId]);

    await setTier(t, tenant, 'team');
    const opened = await openApproval(t, tenant, { toolName: 'pay', arguments: { amount: 5 } });
    expect(opened.statusCode).toBe(201);
    const id = opened.json().id;
    const headers = { cookie, 'x-organization-id': tenant.orgId };
    const pending = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers });
    expect(pending.json().data.map((a: { id: string }) => a.id)).toContain(id);

    const refused = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers,
      payload: { action: 'approve' },
    });
    expectError(refused, 403, 'csrf_failed');
    const wrong = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: { ...headers, 'x-csrf-token': `${csrf.slice(0, -1)}x` },
      payload: { action: 'approve' },
    });
    expectError(wrong, 403, 'csrf_failed');
    // Nothing changed by the refused calls.
    expect((await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers })).json().status).toBe(
      'pending',
    );

    const ok = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: { ...headers, 'x-csrf-token': csrf },
      payload: { action: 'approve' },
    });
    expect(ok.statusCode).toBe(200);
    expect(ok.json().resolvedBy).toBe(tenant.userId);
    const history = await t.inject({ method: 'GET', url: '/v1/approvals/resolved', headers });
    expect(history.json().data[0]).toMatchObject({ id, status: 'approved', resolvedBy: tenant.userId });
  });

  it('never reach another organization', async () => {
    const mine = await createTenant(t);
    const other = await createTenant(t);
    await setTier(t, other, 'team');
    expect((await openApproval(t, other, { toolName: 'pay', arguments: { amount: 5 } })).statusCode).toBe(
      201,
    );
    const { cookie } = await signIn(mine.userId);
    const res = await t.inject({
      method: 'GET',
      url: '/v1/approvals/pending',
      headers: { cookie, 'x-organization-id': other.orgId },
    });
    expectError(res, 403, 'authorization_error');
    const history = await t.inject({
      method: 'GET',
      url: '/v1/approvals/resolved',
      headers: { cookie, 'x-organization-id': other.orgId },
    });
    expectError(history, 403, 'authorization_error');
  });

  it('end at sign-out (which needs the CSRF token) and at expiry', async () => {
    const { cookie, csrf } = await signIn('bob');
    expectError(
      await t.inject({ method: 'POST', url: '/v1/auth/logout', headers: { cookie } }),
      403,
      'csrf_failed',
    );
    const out = await t.inject({
      method: 'POST',
      url: '/v1/auth/logout',
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(out.statusCode).toBe(204);
    expect(String(out.headers['set-cookie'])).toMatch(/Max-Age=0/);
    expectError(
      await t.inject({ method: 'GET', url: '/v1/organizations', headers: { cookie } }),
      401,
      'unauthorized',
    );

    const later = await signIn('bob');
    clock.advance(12 * 3600 + 1);
    const expired = await t.inject({
      method: 'GET',
      url: '/v1/auth/session',
      headers: { cookie: later.cookie },
    });
    expectError(expired, 401, 'unauthorized');
  });

  it('end at sign-out also when a bearer token comes with the cookie', async () => {
    const tenant = await createTenant(t);
    const { cookie } = await signIn(tenant.userId);
    const key = sessionKey(cookie.slice(`${SESSION_COOKIE}=`.length));
    const told: string[] = [];
    const unwatch = t.ctx.sessions.watchEnds((k) => told.push(k));
    try {
      // The bearer token authenticates (no CSRF token needed), and the cookie's session ends with it.
      const out = await t.inject({
        method: 'POST',
        url: '/v1/auth/logout',
        headers: { ...bearer(tenant.token), cookie },
      });
      expect(out.statusCode).toBe(204);
      expect(String(out.headers['set-cookie'])).toMatch(new RegExp(`^${SESSION_COOKIE}=; .*Max-Age=0`));
      expect(told).toEqual([key]);
    } finally {
      unwatch();
    }
    expectError(
      await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie } }),
      401,
      'unauthorized',
    );
    expectError(
      await t.inject({ method: 'GET', url: '/v1/organizations', headers: { cookie } }),
      401,
      'unauthorized',
    );
    // The token itself is not revoked: nothing revokes a user token.
    expect(
      (await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(tenant.token) })).statusCode,
    ).toBe(200);
  });

  it('answer sign-out with a bearer token alone as documented, ending nothing', async () => {
    const tenant = await createTenant(t);
    const { cookie } = await signIn(tenant.userId);
    const told: string[] = [];
    const unwatch = t.ctx.sessions.watchEnds((k) => told.push(k));
    try {
      const out = await t.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(tenant.token) });
      expect(out.statusCode).toBe(204);
      expect(out.body).toBe('');
      expect(String(out.headers['set-cookie'])).toMatch(new RegExp(`^${SESSION_COOKIE}=; .*Max-Age=0`));
      expect(told).toEqual([]);
    } finally {
      unwatch();
    }
    // The same user's dashboard session, not sent with the request, and the token both still work.
    expect((await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie } })).statusCode).toBe(
      200,
    );
    expect(
      (await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(tenant.token) })).statusCode,
    ).toBe(200);
  });

  it('leave bearer tokens as they were, without CSRF', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(tenant.token) });
    expect(res.statusCode).toBe(200);
    expectError(
      await t.inject({ method: 'GET', url: '/v1/auth/session', headers: bearer(tenant.token) }),
      401,
      'unauthorized',
    );
    const created = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { ...bearer(tenant.token), 'x-organization-id': tenant.orgId },
      payload: { name: 'p2', organizationId: tenant.orgId },
    });
    expect(created.statusCode).toBe(201);
  });
});

describe('session ends', () => {
  it('are told to watchers and to the other instances by the stored name, never the cookie value', async () => {
    const { cookie, csrf } = await signIn('carol');
    const told: string[] = [];
    const broadcast: string[] = [];
    const unwatch = t.ctx.sessions.watchEnds((key) => told.push(key));
    const hook = t.ctx.sessions.onEnd;
    t.ctx.sessions.onEnd = (key) => broadcast.push(key);
    try {
      const out = await t.inject({
        method: 'POST',
        url: '/v1/auth/logout',
        headers: { cookie, 'x-csrf-token': csrf },
      });
      expect(out.statusCode).toBe(204);
      const key = sessionKey(cookie.slice(`${SESSION_COOKIE}=`.length));
      expect(key).toMatch(/^[0-9a-f]{64}$/);
      expect(told).toEqual([key]);
      expect(broadcast).toEqual([key]);
      // An end told by another instance reaches the watchers here, and goes nowhere else.
      t.ctx.sessions.ended('f'.repeat(64), false);
      expect(told).toEqual([key, 'f'.repeat(64)]);
      expect(broadcast).toEqual([key]);
    } finally {
      unwatch();
      t.ctx.sessions.onEnd = hook;
    }
  });
});
