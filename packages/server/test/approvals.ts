import type { ServiceEvent } from '../src/events/bus.js';
import type { Clock } from '../src/lib/clock.js';
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

/**
 * Resolves as an API key, or as a tenant's user. A key cannot resolve an approval it requested, so
 * approvals opened by a tenant's own key are resolved as its user.
 */
export const resolveApproval = (
  t: TestApp,
  by: string | Tenant,
  id: string,
  action: string,
  resolvedBy = 'alice',
) =>
  t.inject({
    method: 'POST',
    url: `/v1/approvals/${id}/resolve`,
    headers: typeof by === 'string' ? keyHeader(by) : asUser(by),
    payload: { action, resolvedBy },
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
