import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTestApp, expectError, type TestApp, withTestApp } from '../../../test/helpers.js';
import { type SignInProvider, startSignInProvider } from '../../../test/oidc-sign-in-provider.js';
import { loadOidcSettings } from '../../config.js';
import { OIDC_SIGN_INS_MAX, OIDC_STATE_COOKIE, SESSION_COOKIE } from './model.js';

/**
 * Dashboard sign-in through a real OpenID provider (oidc-provider): the authorization code flow with
 * PKCE, state bound to the browser, single use, and the failures a person can meet.
 */
const BASE = 'http://127.0.0.1:18080';
const CALLBACK = `${BASE}/v1/auth/oidc/callback`;

let idp: SignInProvider;

const settings = (overrides: Record<string, string> = {}) =>
  loadOidcSettings({
    SVC_OIDC_ISSUER: idp.issuer,
    SVC_OIDC_CLIENT_ID: idp.clientId,
    SVC_OIDC_CLIENT_SECRET: idp.clientSecret,
    SVC_OIDC_NAME: 'Example IdP',
    ...overrides,
  });

beforeAll(async () => {
  idp = await startSignInProvider(CALLBACK);
});
afterAll(async () => {
  await idp?.stop();
});
const t = useTestApp(() => ({ baseUrl: BASE, oidc: settings() }));

const cookieOf = (setCookie: string | string[] | undefined, name: string) =>
  [setCookie ?? []]
    .flat()
    .map((c) => c.split(';')[0]!)
    .find((c) => c.startsWith(`${name}=`));

/** Starts a sign-in at the service: the provider's URL and the state cookie set in the browser. */
async function begin(app: TestApp = t) {
  const res = await app.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
  expect(res.statusCode).toBe(303);
  return {
    location: String(res.headers.location),
    stateCookie: cookieOf(res.headers['set-cookie'], OIDC_STATE_COOKIE),
  };
}

/** Plays the browser at the provider: follows its redirects, fills the login form, stops at our callback. */
async function atProvider(start: string, user: string): Promise<string> {
  const jar = new Map<string, string>();
  let url = start;
  let method = 'GET';
  let body: string | undefined;
  for (let hop = 0; hop < 20; hop++) {
    if (url.startsWith(BASE)) return url;
    const res = await fetch(url, {
      method,
      redirect: 'manual',
      headers: {
        cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; '),
        ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
      },
      ...(body ? { body } : {}),
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const eq = pair!.indexOf('=');
      jar.set(pair!.slice(0, eq), pair!.slice(eq + 1));
    }
    method = 'GET';
    body = undefined;
    if (res.status >= 300 && res.status < 400) {
      url = new URL(res.headers.get('location')!, url).href;
      continue;
    }
    const html = await res.text();
    const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
    if (res.status !== 200 || !action)
      throw new Error(`provider answered ${res.status}: ${html.slice(0, 200)}`);
    url = new URL(action, url).href;
    method = 'POST';
    body = new URLSearchParams({ login: user }).toString();
  }
  throw new Error('too many redirects at the provider');
}

/** The provider's redirect back, as the browser that began the sign-in sends it. */
async function callback(url: string, stateCookie: string | undefined, app: TestApp = t) {
  const u = new URL(url);
  return app.inject({
    method: 'GET',
    url: u.pathname + u.search,
    headers: stateCookie ? { cookie: stateCookie } : {},
  });
}

describe('sign-in through an OpenID Connect provider', () => {
  it('is announced to the sign-in page', async () => {
    const res = await t.inject({ method: 'GET', url: '/v1/auth/methods' });
    expect(res.json()).toEqual({ loginLink: true, oidc: { name: 'Example IdP' } });
    await withTestApp({}, async (plain) => {
      expect((await plain.inject({ method: 'GET', url: '/v1/auth/methods' })).json()).toEqual({
        loginLink: true,
        oidc: null,
      });
      expectError(await plain.inject({ method: 'GET', url: '/v1/auth/oidc/login' }), 404, 'not_found');
    });
  });

  it('opens a session as the ID token subject, after PKCE, state and nonce checks', async () => {
    const { location, stateCookie } = await begin();
    const auth = new URL(location);
    expect(auth.origin).toBe(idp.issuer);
    expect(auth.searchParams.get('code_challenge_method')).toBe('S256');
    expect(auth.searchParams.get('nonce')).toMatch(/.{20,}/);
    expect(auth.searchParams.get('redirect_uri')).toBe(CALLBACK);
    expect(stateCookie).toBe(`${OIDC_STATE_COOKIE}=${auth.searchParams.get('state')}`);

    const back = await atProvider(location, 'carol');
    const res = await callback(back, stateCookie);
    expect(res.statusCode).toBe(303);
    expect(res.headers.location).toBe('/');
    const session = cookieOf(res.headers['set-cookie'], SESSION_COOKIE);
    expect(session).toMatch(/^svc_session=[A-Za-z0-9_-]{43}$/);
    expect(cookieOf(res.headers['set-cookie'], OIDC_STATE_COOKIE)).toBe(`${OIDC_STATE_COOKIE}=`);
    const who = await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie: session! } });
    expect(who.statusCode).toBe(200);
    expect(who.json().userId).toBe('carol');

    // The same answer again (a replayed or reloaded callback) signs nobody in.
    const again = await callback(back, stateCookie);
    expect(again.headers.location).toBe('/?signin=invalid');
    expect(cookieOf(again.headers['set-cookie'], SESSION_COOKIE)).toBeUndefined();
  });

  it('refuses a callback from a browser that did not begin the sign-in (login CSRF)', async () => {
    const { location } = await begin();
    const back = await atProvider(location, 'mallory');
    const res = await callback(back, undefined);
    expect(res.headers.location).toBe('/?signin=invalid');
    expect(cookieOf(res.headers['set-cookie'], SESSION_COOKIE)).toBeUndefined();
    const other = await begin();
    const swapped = await callback(back, other.stateCookie);
    expect(swapped.headers.location).toBe('/?signin=invalid');
    // A callback with no, a repeated or an overlong state leads to the page as well, never to JSON.
    for (const query of ['', '?state=a&state=b', `?state=${'s'.repeat(300)}&code=x`]) {
      const res = await t.inject({ method: 'GET', url: `/v1/auth/oidc/callback${query}` });
      expect(res.statusCode, query).toBe(303);
      expect(res.headers.location, query).toBe('/?signin=invalid');
    }
  });

  it('uses the configured claim as the user id', async () => {
    await withTestApp({ baseUrl: BASE, oidc: settings({ SVC_OIDC_USER_CLAIM: 'email' }) }, async (app) => {
      const { location, stateCookie } = await begin(app);
      const res = await callback(await atProvider(location, 'dave'), stateCookie, app);
      const session = cookieOf(res.headers['set-cookie'], SESSION_COOKIE)!;
      const who = await app.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie: session } });
      expect(who.json().userId).toBe('dave@example.test');

      // An address the provider has not verified signs nobody in.
      const again = await begin(app);
      const refused = await callback(
        await atProvider(again.location, 'unverified-eve'),
        again.stateCookie,
        app,
      );
      expect(refused.headers.location).toBe('/?signin=no_user');
      expect(cookieOf(refused.headers['set-cookie'], SESSION_COOKIE)).toBeUndefined();
    });
  });

  it('sends the person back with a reason when the provider refuses the client', async () => {
    const app = await createTestApp({
      baseUrl: BASE,
      oidc: settings({ SVC_OIDC_CLIENT_SECRET: 'wrong-secret' }),
    });
    try {
      const { location, stateCookie } = await begin(app);
      const res = await callback(await atProvider(location, 'erin'), stateCookie, app);
      expect(res.headers.location).toBe('/?signin=provider_refused');
      expect(cookieOf(res.headers['set-cookie'], SESSION_COOKIE)).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it('passes on an error the provider redirects back with', async () => {
    const { location, stateCookie } = await begin();
    const state = new URL(location).searchParams.get('state')!;
    const res = await callback(
      `${CALLBACK}?error=access_denied&state=${state}&iss=${encodeURIComponent(idp.issuer)}`,
      stateCookie,
    );
    expect(res.headers.location).toBe('/?signin=provider_refused');
  });

  it('answers provider_unreachable when the provider is down, and recovers on its own', async () => {
    const down = await startSignInProvider(CALLBACK);
    const app = await createTestApp({
      baseUrl: BASE,
      oidc: loadOidcSettings({ SVC_OIDC_ISSUER: down.issuer, SVC_OIDC_CLIENT_ID: down.clientId }),
    });
    try {
      await down.stop();
      const res = await app.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
      expect(res.statusCode).toBe(303);
      expect(res.headers.location).toBe('/?signin=provider_unreachable');
      expect(res.headers['set-cookie']).toBeUndefined();
    } finally {
      await app.close();
    }
  });
});

describe('sign-ins under way', () => {
  it('drop when expired, and are capped by dropping the oldest: nobody can lock sign-in', async () => {
    const db = t.store.db;
    await db.deleteFrom('oidc_sign_ins').execute();
    const row = (i: number, expires: string) => ({
      state_hash: `filler-${i}`,
      code_verifier: 'v',
      nonce: 'n',
      created_at: '2026-01-01T00:00:00.000Z',
      expires_at: expires,
    });
    const expired = Array.from({ length: 500 }, (_, i) => row(i, '2000-01-01T00:00:00.000Z'));
    await db.insertInto('oidc_sign_ins').values(expired).execute();
    const first = await t.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
    expect(new URL(String(first.headers.location)).origin).toBe(idp.issuer);
    const left = await db.selectFrom('oidc_sign_ins').select('state_hash').execute();
    expect(left).toHaveLength(1);

    for (let i = 0; i < OIDC_SIGN_INS_MAX - 1; i += 1000) {
      const n = Math.min(1000, OIDC_SIGN_INS_MAX - 1 - i);
      await db
        .insertInto('oidc_sign_ins')
        .values(Array.from({ length: n }, (_, j) => row(1000 + i + j, '2999-01-01T00:00:00.000Z')))
        .execute();
    }
    // Full: the next sign-in still begins, and the oldest one under way makes room for it.
    const count = async () =>
      Number(
        (
          await db
            .selectFrom('oidc_sign_ins')
            .select((eb) => eb.fn.countAll<number | string>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    expect(await count()).toBe(OIDC_SIGN_INS_MAX);
    const full = await t.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
    expect(new URL(String(full.headers.location)).origin).toBe(idp.issuer);
    expect(String(full.headers['set-cookie'])).toContain(OIDC_STATE_COOKIE);
    expect(await count()).toBe(OIDC_SIGN_INS_MAX);
    // The fillers were begun earliest: one of them went; the two real sign-ins are kept.
    const real = await db
      .selectFrom('oidc_sign_ins')
      .select('state_hash')
      .where('state_hash', 'not like', 'filler-%')
      .execute();
    expect(real.map((r) => r.state_hash)).toContain(left[0]!.state_hash);
    expect(real).toHaveLength(2);
    await db.deleteFrom('oidc_sign_ins').execute();
  });
});

describe('SVC_OIDC_* settings', () => {
  it('are all or nothing, and need HTTPS unless the provider is on this machine', () => {
    expect(loadOidcSettings({})).toBeNull();
    expect(() => loadOidcSettings({ SVC_OIDC_CLIENT_ID: 'x' })).toThrow(/SVC_OIDC_ISSUER is not/);
    expect(() => loadOidcSettings({ SVC_OIDC_ISSUER: 'https://idp.example' })).toThrow(/SVC_OIDC_CLIENT_ID/);
    expect(() =>
      loadOidcSettings({ SVC_OIDC_ISSUER: 'http://idp.example', SVC_OIDC_CLIENT_ID: 'x' }),
    ).toThrow(/https/);
    expect(() =>
      loadOidcSettings({
        SVC_OIDC_ISSUER: 'https://idp.example',
        SVC_OIDC_CLIENT_ID: 'x',
        SVC_OIDC_SCOPES: 'email',
      }),
    ).toThrow(/openid/);
    expect(
      loadOidcSettings({ SVC_OIDC_ISSUER: 'http://localhost:9000', SVC_OIDC_CLIENT_ID: 'x' }),
    ).toMatchObject({
      clientSecret: null,
      scopes: 'openid profile email',
      userClaim: 'sub',
    });
  });
});
