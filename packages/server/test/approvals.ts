import type { ServiceEvent } from '../src/events/bus.js';
import type { Clock } from '../src/lib/clock.js';
import type { OrgScope } from '../src/lib/scope.js';
import { ADMIN_TOKEN, asUser, bearer, keyHeader, type Tenant, type TestApp } from './helpers.js';

/** A clock tests move by hand; starts at the real time so JWTs and receipts look ordinary. */
export class ManualClock implements Clock {
  private ms = Date.now();
  now(): Date {
    return new Date(this.ms);
  }
  advance(seconds: number): void {
    this.ms += seconds * 1000;
  }
}

export async function setTier(t: TestApp, tenant: Tenant, tier: string): Promise<void> {
  const res = await t.inject({
    method: 'PATCH',
    url: `/v1/admin/organizations/${tenant.orgId}`,
    headers: bearer(ADMIN_TOKEN),
    payload: { tier },
  });
  if (res.statusCode !== 200) throw new Error(`tier change failed: ${res.body}`);
}

/** Events of one organization, collected until stop(). */
export function collectEvents(t: TestApp, orgId: string): { events: ServiceEvent[]; stop(): void } {
  const events: ServiceEvent[] = [];
  const stop = t.ctx.events.subscribe((e) => {
    if (e.organizationId === orgId) events.push(e);
  });
  return { events, stop };
}

export const openApproval = (t: TestApp, tenant: Tenant, payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/approvals', headers: keyHeader(tenant.apiKey), payload });

/** A new key of the tenant's project with the given scopes, created by its user. */
export async function createKey(t: TestApp, tenant: Tenant, scopes: string[], name = 'key'): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: asUser(tenant),
    payload: { name, projectId: tenant.projectId, scopes },
  });
  if (res.statusCode !== 201) throw new Error(`key create failed: ${res.body}`);
  return res.json().key;
}

/** A new key of the tenant's project minted by the API key `by` (so of its lineage). */
export async function mintKey(t: TestApp, tenant: Tenant, by: string, scopes: string[]): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: keyHeader(by),
    payload: { name: 'minted', projectId: tenant.projectId, scopes },
  });
  if (res.statusCode !== 201) throw new Error(`key mint failed: ${res.body}`);
  return res.json().key;
}

/** Makes `userId` a member of the tenant's organization: the tenant as that person. */
export async function addMember(t: TestApp, tenant: Tenant, userId: string): Promise<Tenant> {
  await t.store.db
    .insertInto('memberships')
    .values({
      organization_id: tenant.orgId,
      user_id: userId,
      role: 'member',
      created_at: new Date().toISOString(),
    })
    .execute();
  return { ...tenant, userId, token: await t.token(userId) };
}

const approverKeys = new WeakMap<Tenant, Promise<string>>();

/**
 * The tenant's approver key (scope approvals:resolve), created once, as a chat bot's key: by another
 * member of the organization (its administrator), not by the tenant's user. Under dual control a key
 * relays as its creator too, so the tenant's user and this key are two people.
 */
export function approverKey(t: TestApp, tenant: Tenant): Promise<string> {
  let key = approverKeys.get(tenant);
  if (!key) {
    key = addMember(t, tenant, `${tenant.userId}-bot-admin`).then((admin) =>
      createKey(t, admin, ['approvals:resolve'], 'approver'),
    );
    approverKeys.set(tenant, key);
  }
  return key;
}

/**
 * Resolves an approval. With a tenant and no name: as the tenant's user (recorded as the user id).
 * With a tenant and a name: through the tenant's approver key relaying that person. With a raw API
 * key: as that key, relaying `resolvedBy`.
 */
export async function resolveApproval(
  t: TestApp,
  by: string | Tenant,
  id: string,
  action: string,
  resolvedBy?: string,
) {
  const headers =
    typeof by === 'string'
      ? keyHeader(by)
      : resolvedBy === undefined
        ? asUser(by)
        : keyHeader(await approverKey(t, by));
  const relayed = typeof by === 'string' ? (resolvedBy ?? 'alice') : resolvedBy;
  return t.inject({
    method: 'POST',
    url: `/v1/approvals/${id}/resolve`,
    headers,
    payload: { action, ...(relayed !== undefined ? { resolvedBy: relayed } : {}) },
  });
}

/** The service-level scope of a tenant's user, for tests that call services directly. */
export const asUserScope = (tenant: Tenant): OrgScope => ({
  organizationId: tenant.orgId,
  projectId: null,
  principal: { kind: 'user', userId: tenant.userId },
});

/** The organization's receipts in chain order, as stored. */
export async function receiptsOf(t: TestApp, orgId: string): Promise<string[]> {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', orgId)
    .orderBy('sequence')
    .execute();
  return rows.map((r) => r.payload);
}
