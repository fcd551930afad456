import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  addMember,
  approverKey,
  collectEvents,
  createKey,
  mintKey,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { CSRF_HEADER } from '../sessions/model.js';
import { pendingApprovalRow } from './model.js';
import { createApprovalRepository } from './repository.js';

const t = useTestApp();

/** A Team organization whose user's id holds an accented letter, written precomposed (NFC). */
async function accentedTenant(): Promise<Tenant> {
  const tenant = await createTenant(t, `jos\u00e9-${randomBytes(3).toString('hex')}`);
  await setTier(t, tenant, 'team');
  return tenant;
}

/** A pending approval that needs two distinct people, as a capsule mint under dual control opens it. */
async function dualControl(tenant: Tenant, requestedBy: string | null = null): Promise<string> {
  const row = pendingApprovalRow(
    { organizationId: tenant.orgId, projectId: tenant.projectId },
    { decisionId: null, toolName: 'wire', arguments: { amount: 5 }, requiredApprovals: 2, requestedBy },
    new Date(),
  );
  await createApprovalRepository(t.store.db).insert(row);
  return row.id;
}

const state = async (tenant: Tenant, id: string) =>
  (await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: keyHeader(tenant.apiKey) })).json();

/** Redeems a login link for the user: the session cookie and its CSRF token. */
async function signIn(userId: string): Promise<Record<string, string>> {
  const link = new URL((await t.ctx.sessions.createLoginLink(userId, 900)).url);
  const res = await t.inject({ method: 'GET', url: link.pathname + link.search });
  const cookie = String(res.headers['set-cookie']).split(';')[0]!;
  const session = await t.inject({ method: 'GET', url: '/v1/auth/session', headers: { cookie } });
  return { cookie, [CSRF_HEADER]: session.json().csrfToken };
}

describe('dual control: one person is one approver, however they reach the service', () => {
  it('counts a person once through their token, their session cookie and a key relaying their id', async () => {
    const tenant = await accentedTenant();
    const id = await dualControl(tenant);
    const seen = collectEvents(t, tenant.orgId);
    const first = await resolveApproval(t, tenant, id, 'approve');
    expect(first.json()).toMatchObject({ status: 'pending', requiredApprovals: 2 });
    const cookie = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: { ...(await signIn(tenant.userId)), 'x-organization-id': tenant.orgId },
      payload: { action: 'approve' },
    });
    expectError(cookie, 409, 'approval_already_resolved');
    expectError(
      await resolveApproval(t, tenant, id, 'approve', tenant.userId),
      409,
      'approval_already_resolved',
    );
    seen.stop();
    expect(seen.events.filter((e) => e.type === 'approval.resolved')).toEqual([]);
    expect(await state(tenant, id)).toMatchObject({
      status: 'pending',
      approvers: [{ resolvedBy: tenant.userId }],
    });
  });

  it('counts a person once when a key relays their name in another Unicode form or with spaces around it', async () => {
    const tenant = await accentedTenant();
    const decomposed = tenant.userId.normalize('NFD');
    expect(decomposed).not.toBe(tenant.userId);
    const zeroWidth = `${tenant.userId.slice(0, 2)}\u200B${tenant.userId.slice(2)}`;
    for (const relayed of [decomposed, ` ${tenant.userId} `, zeroWidth]) {
      const id = await dualControl(tenant);
      expect((await resolveApproval(t, tenant, id, 'approve')).json().status).toBe('pending');
      const again = await resolveApproval(t, tenant, id, 'approve', relayed);
      expectError(again, 409, 'approval_already_resolved');
      expect(await state(tenant, id)).toMatchObject({
        status: 'pending',
        approvers: [{ resolvedBy: tenant.userId }],
      });
    }
    // Relayed first, then the person's own token: still one person.
    const id = await dualControl(tenant);
    expect((await resolveApproval(t, tenant, id, 'approve', decomposed)).json().status).toBe('pending');
    expectError(await resolveApproval(t, tenant, id, 'approve'), 409, 'approval_already_resolved');
    expect((await state(tenant, id)).status).toBe('pending');
  });

  it('refuses the requester relayed under another Unicode form of their id', async () => {
    const tenant = await accentedTenant();
    const id = await dualControl(tenant, tenant.userId);
    const res = await resolveApproval(t, tenant, id, 'approve', tenant.userId.normalize('NFD'));
    expectError(res, 403, 'authorization_error');
    expect(await state(tenant, id)).toMatchObject({ status: 'pending', approvers: [] });
    // Two other people approve it.
    expect((await resolveApproval(t, tenant, id, 'approve', 'carol')).json().status).toBe('pending');
    // Dave's own key (a key relays as its creator too: the requester's key could not approve).
    const dave = await addMember(t, tenant, `dave-${randomBytes(3).toString('hex')}`);
    const key = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: { authorization: `Bearer ${dave.token}`, 'x-organization-id': tenant.orgId },
      payload: { name: 'second approver', projectId: tenant.projectId, scopes: ['approvals:resolve'] },
    });
    const done = await resolveApproval(t, key.json().key, id, 'approve', 'dave');
    expect(done.json()).toMatchObject({
      status: 'approved',
      approvers: [{ resolvedBy: 'carol' }, { resolvedBy: 'dave' }],
    });
  });

  it('counts the keys of one lineage as one relay: a key cannot mint a second approver key', async () => {
    const tenant = await accentedTenant();
    const id = await dualControl(tenant);
    // A key that may also mint keys (api); an approver-only key cannot mint any. A bot's key, made by
    // another member: the tenant's user approving in person is then another person.
    const admin = await addMember(t, tenant, `relay-admin-${randomBytes(3).toString('hex')}`);
    const relay = await createKey(t, admin, ['api', 'approvals:resolve'], 'relay');
    const minted = await mintKey(t, tenant, relay, ['approvals:resolve']);
    expect((await resolveApproval(t, relay, id, 'approve', 'alice')).json()).toMatchObject({
      status: 'pending',
    });
    const second = await resolveApproval(t, minted, id, 'approve', 'bob');
    expectError(second, 409, 'approval_already_resolved');
    expect(second.json().error.message).toMatch(/of the lineage of API key/);
    // A person's own token is a second approver.
    expect((await resolveApproval(t, tenant, id, 'approve')).json()).toMatchObject({ status: 'approved' });
  });

  it('refuses a key relaying a name of spaces only: it names no person', async () => {
    const tenant = await accentedTenant();
    const id = await dualControl(tenant);
    const key = await approverKey(t, tenant);
    for (const blank of [' ', '   ']) {
      expectError(await resolveApproval(t, key, id, 'approve', blank), 400, 'validation_failed');
    }
    const batch = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: keyHeader(key),
      payload: { ids: [id], action: 'deny', resolvedBy: '  ' },
    });
    expectError(batch, 400, 'validation_failed');
    expect(await state(tenant, id)).toMatchObject({ status: 'pending', approvers: [] });
  });
});
