import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTestApp } from '../../../test/helpers.js';
import {
  type Behaviour,
  type Endpoint,
  type MisbehavingProvider,
  startMisbehavingProvider,
} from '../../../test/oidc-misbehaving-provider.js';
import { loadOidcSettings } from '../../config.js';
import { OIDC_STATE_COOKIE, SESSION_COOKIE } from './model.js';
import { createOidcSignIn, SignInFailed } from './oidc.js';

/**
 * Sign-in through a provider that misbehaves one way at a time: forged ID tokens, unusable discovery
 * documents, answers that stall, break off, never end or redirect, and user claims that are not text.
 */
const BASE = 'http://127.0.0.1:18080';
const CALLBACK = `${BASE}/v1/auth/oidc/callback`;
const MiB = 1024 * 1024;

let idp: MisbehavingProvider;
beforeAll(async () => {
  idp = await startMisbehavingProvider();
});
afterAll(async () => {
  await idp?.stop();
});
beforeEach(() => {
  idp.behave({});
  idp.hits.clear();
  idp.sent.clear();
});
afterEach(() => {
  vi.useRealTimers();
});

const settings = (provider: MisbehavingProvider, env: Record<string, string> = {}) =>
  loadOidcSettings({
    SVC_OIDC_ISSUER: provider.issuer,
    SVC_OIDC_CLIENT_ID: provider.clientId,
    SVC_OIDC_CLIENT_SECRET: provider.clientSecret,
    ...env,
  })!;

const warnings: unknown[][] = [];
const log = { warn: (...args: unknown[]) => void warnings.push(args) };
const signInWith = (provider: MisbehavingProvider = idp, env: Record<string, string> = {}) =>
  createOidcSignIn(settings(provider, env), CALLBACK, log);

/** A whole sign-in as `user`: the user id it ends with, or the reason it failed. */
async function outcome(
  oidc: ReturnType<typeof createOidcSignIn>,
  user = 'forged-user',
  provider: MisbehavingProvider = idp,
): Promise<string> {
  try {
    const state = randomBytes(16).toString('base64url');
    const { url, pending } = await oidc.begin(state);
    const back = await provider.authorize(url, user);
    return `signed in as ${await oidc.finish(new URL(back), state, pending)}`;
  } catch (err) {
    if (err instanceof SignInFailed) return err.reason;
    throw err;
  }
}

/** A provider of its own for a test that needs two behaving differently at once. */
async function withProvider<T>(behaviour: Behaviour, run: (p: MisbehavingProvider) => Promise<T>) {
  const provider = await startMisbehavingProvider();
  provider.behave(behaviour);
  try {
    return await run(provider);
  } finally {
    await provider.stop();
  }
}

describe("the ID token's signature", () => {
  it("is checked against the provider's key set", async () => {
    expect(await outcome(signInWith(), 'carol')).toBe('signed in as carol');
    expect(idp.hits.get('jwks')).toBe(1);
  });

  it('refuses a token signed with a key the provider does not publish, or not signed', async () => {
    idp.behave({ signWith: 'unpublished' });
    expect(await outcome(signInWith())).toBe('invalid_answer');
    expect(idp.hits.get('jwks')).toBeGreaterThanOrEqual(1);
    idp.behave({ signWith: 'none' });
    expect(await outcome(signInWith())).toBe('invalid_answer');
  });

  it('fails the sign-in through the service with invalid_answer and opens no session', async () => {
    idp.behave({ signWith: 'unpublished' });
    const app = await createTestApp({ baseUrl: BASE, oidc: settings(idp) });
    try {
      const begun = await app.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
      const stateCookie = String(begun.headers['set-cookie']).split(';')[0]!;
      expect(stateCookie.startsWith(`${OIDC_STATE_COOKIE}=`)).toBe(true);
      const back = new URL(await idp.authorize(String(begun.headers.location), 'forged-user'));
      const res = await app.inject({
        method: 'GET',
        url: back.pathname + back.search,
        headers: { cookie: stateCookie },
      });
      expect(res.statusCode).toBe(303);
      expect(res.headers.location).toBe('/?signin=invalid_answer');
      expect(String(res.headers['set-cookie'])).not.toContain(`${SESSION_COOKIE}=`);
    } finally {
      await app.close();
    }
  });
});

describe('an unusable discovery document', () => {
  const withoutAuthorizationEndpoint = ({ authorization_endpoint: _, ...doc }: Record<string, unknown>) =>
    doc;

  it.each<[string, (doc: Record<string, unknown>) => Record<string, unknown>]>([
    ['no authorization_endpoint', withoutAuthorizationEndpoint],
    ['no token_endpoint', ({ token_endpoint: _, ...doc }) => doc],
    ['no jwks_uri', ({ jwks_uri: _, ...doc }) => doc],
    [
      'a javascript: authorization_endpoint',
      (doc) => ({ ...doc, authorization_endpoint: 'javascript:alert(1)' }),
    ],
    ['an authorization_endpoint that is no URL', (doc) => ({ ...doc, authorization_endpoint: 42 })],
  ])('with %s fails the sign-in as invalid_answer', async (_what, metadata) => {
    idp.behave({ metadata });
    expect(await outcome(signInWith())).toBe('invalid_answer');
  });

  it('sends the person back with invalid_answer, is not kept, and is read again 5 s later', async () => {
    idp.behave({ metadata: withoutAuthorizationEndpoint });
    const app = await createTestApp({ baseUrl: BASE, oidc: settings(idp) });
    try {
      const login = () => app.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
      const first = await login();
      expect(first.statusCode).toBe(303);
      expect(first.headers.location).toBe('/?signin=invalid_answer');
      expect(first.headers['set-cookie']).toBeUndefined();
      expect(idp.hits.get('discovery')).toBe(1);

      // The provider is fixed: within 5 s the failure stands without asking again, then it is read anew.
      idp.behave({});
      vi.useFakeTimers({ toFake: ['Date'] });
      expect((await login()).headers.location).toBe('/?signin=invalid_answer');
      expect(idp.hits.get('discovery')).toBe(1);
      vi.setSystemTime(Date.now() + 5_001);
      const later = await login();
      expect(later.statusCode).toBe(303);
      expect(new URL(String(later.headers.location)).origin).toBe(idp.issuer);
      expect(idp.hits.get('discovery')).toBe(2);
    } finally {
      await app.close();
    }
  });
});

describe('an answer that does not arrive', () => {
  it.each<Endpoint>(['token', 'userinfo'])(
    'at the %s endpoint, broken off mid-body, is provider_unreachable',
    async (endpoint) => {
      idp.behave({ misbehave: { [endpoint]: 'reset' } });
      // The user claim `email` is not in the ID token: it is asked of the UserInfo endpoint.
      expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }))).toBe('provider_unreachable');
      expect(idp.hits.get(endpoint)).toBe(1);
    },
  );

  it('at the token or UserInfo endpoint, stalled mid-body past the 10 s timeout, is provider_unreachable', async () => {
    const started = Date.now();
    const reasons = await Promise.all(
      (['token', 'userinfo'] as const).map((endpoint) =>
        withProvider({ misbehave: { [endpoint]: 'stall' } }, (p) =>
          outcome(signInWith(p, { SVC_OIDC_USER_CLAIM: 'email' }), 'carol', p),
        ),
      ),
    );
    expect(reasons).toEqual(['provider_unreachable', 'provider_unreachable']);
    expect(Date.now() - started).toBeGreaterThanOrEqual(9_900);
  }, 30_000);
});

describe('answers over 1 MiB', () => {
  it.each<[Endpoint, boolean]>([
    ['discovery', false],
    ['token', false],
    ['token', true],
    ['userinfo', false],
    ['jwks', false],
    ['jwks', true],
  ])(
    'from the %s endpoint (Content-Length announced: %s) are refused unread, as invalid_answer',
    async (endpoint, declared) => {
      idp.behave({ misbehave: { [endpoint]: { huge: 100 * MiB, declared } } });
      expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'carol')).toBe(
        'invalid_answer',
      );
      expect(idp.hits.get(endpoint)).toBe(1);
      // Reading stopped at the limit: the provider could write little more than what the buffers hold.
      expect(idp.sent.get(endpoint)).toBeLessThan(16 * MiB);
    },
  );

  it('are accepted up to the limit', async () => {
    idp.behave({ misbehave: { token: { huge: MiB } } });
    expect(await outcome(signInWith(), 'carol')).toBe('signed in as carol');
  });
});

describe('a redirect from the provider', () => {
  it.each<Endpoint>(['discovery', 'token', 'userinfo', 'jwks'])(
    'at the %s endpoint is not followed: provider_unreachable',
    async (endpoint) => {
      idp.behave({ misbehave: { [endpoint]: 'redirect' } });
      expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'carol')).toBe(
        'provider_unreachable',
      );
      expect(idp.hits.get(endpoint)).toBe(1);
      expect(idp.hits.get(`elsewhere:${endpoint}`)).toBeUndefined();
    },
  );
});

describe('the email claim', () => {
  it('in the ID token, verified only in UserInfo: the address from the ID token, verified there', async () => {
    idp.behave({
      claims: { email: 'dana@example.test' },
      userinfo: { email: undefined, email_verified: true },
    });
    expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'dana')).toBe(
      'signed in as dana@example.test',
    );
    expect(idp.hits.get('userinfo')).toBe(1);
  });

  it('verified nowhere, or said unverified in UserInfo: no_user', async () => {
    idp.behave({ claims: { email: 'erin@example.test' }, userinfo: { email_verified: false } });
    expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'erin')).toBe('no_user');
    idp.behave({ claims: { email: 'erin@example.test', email_verified: false } });
    expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'erin')).toBe('no_user');
  });
});

describe('a user claim that is not well-formed Unicode', () => {
  it.each(['\ud800', '\udfff', 'a\ud800b'])('(%j in sub) signs nobody in: no_user', async (sub) => {
    idp.behave({ claims: { sub } });
    expect(await outcome(signInWith())).toBe('no_user');
  });

  it('from the UserInfo endpoint signs nobody in either', async () => {
    idp.behave({ userinfo: { email: '\udfff' } });
    expect(await outcome(signInWith(idp, { SVC_OIDC_USER_CLAIM: 'email' }), 'carol')).toBe('no_user');
  });

  it('while characters beyond the BMP (surrogate pairs) are a user id like any other', async () => {
    idp.behave({ claims: { sub: 'ana-😀' } });
    expect(await outcome(signInWith())).toBe('signed in as ana-😀');
  });
});
