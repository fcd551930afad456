import type { ServiceEvent } from '../src/events/bus.js';
import type { Clock } from '../src/lib/clock.js';
import { ADMIN_TOKEN, bearer, keyHeader, type Tenant, type TestApp } from './helpers.js';

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

export const resolveApproval = (t: TestApp, key: string, id: string, action: string, resolvedBy = 'alice') =>
  t.inject({
    method: 'POST',
    url: `/v1/approvals/${id}/resolve`,
    headers: keyHeader(key),
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
