import { asUser, bearer, type Tenant, type TestApp } from './helpers.js';

/** A dashboard session of `userId`: the cookie header value and the session's CSRF token. */
export async function signIn(t: TestApp, userId: string): Promise<{ cookie: string; csrf: string }> {
  const link = new URL((await t.ctx.sessions.createLoginLink(userId, 900)).url);
  const res = await t.inject({ method: 'GET', url: link.pathname + link.search });
  const cookie = String(res.headers['set-cookie']).split(';')[0]!;
  const session = await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie } });
  if (session.statusCode !== 200) throw new Error(`sign-in failed: ${session.body}`);
  return { cookie, csrf: session.json().csrfToken };
}

export async function signOut(t: TestApp, session: { cookie: string; csrf: string }): Promise<void> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/auth/logout',
    headers: { cookie: session.cookie, 'x-csrf-token': session.csrf },
  });
  if (res.statusCode !== 204) throw new Error(`sign-out failed: ${res.statusCode} ${res.body}`);
}

/** A second key of the tenant's project (so the first stays usable): its id and the key. */
export async function mintKey(t: TestApp, tenant: Tenant): Promise<{ id: string; key: string }> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: asUser(tenant),
    payload: { name: 'revocable', projectId: tenant.projectId },
  });
  if (res.statusCode !== 201) throw new Error(`key create failed: ${res.body}`);
  return { id: res.json().id, key: res.json().key };
}

/** The ways a key stops authenticating: each applies to `keyId`, a key of the tenant's project. */
export const REVOCATIONS = {
  'revoking the key': (t: TestApp, tenant: Tenant, keyId: string) =>
    t.inject({ method: 'POST', url: `/v1/api-keys/${keyId}/revoke`, headers: asUser(tenant) }),
  'deleting the key': (t: TestApp, tenant: Tenant, keyId: string) =>
    t.inject({ method: 'DELETE', url: `/v1/api-keys/${keyId}`, headers: asUser(tenant) }),
  "regenerating the project's key": (t: TestApp, tenant: Tenant) =>
    t.inject({
      method: 'POST',
      url: `/v1/projects/${tenant.projectId}/regenerate-key`,
      headers: asUser(tenant),
    }),
  'deleting the project': (t: TestApp, tenant: Tenant) =>
    t.inject({ method: 'DELETE', url: `/v1/projects/${tenant.projectId}`, headers: asUser(tenant) }),
  'deleting the organization': (t: TestApp, tenant: Tenant) =>
    t.inject({ method: 'DELETE', url: `/v1/organizations/${tenant.orgId}`, headers: bearer(tenant.token) }),
} as const;

export type Revocation = keyof typeof REVOCATIONS;

/** Applies one way of revocation and checks it was done. */
export async function revoke(t: TestApp, how: Revocation, tenant: Tenant, keyId: string): Promise<void> {
  const res = await REVOCATIONS[how](t, tenant, keyId);
  if (res.statusCode !== 200) throw new Error(`${how} failed: ${res.statusCode} ${res.body}`);
}
