import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { addMember, createKey, mintKey, resolveApproval, setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { pendingApprovalRow } from './model.js';
import { createApprovalRepository } from './repository.js';

const t = useTestApp();

const PAYEE = { name: 'ACME Supplies', account_number: 'DE8937040044' };
const tag = () => randomBytes(3).toString('hex');

/** A Team organization (alice, its user) with a pack under dual control from $1000. */
async function organization(): Promise<Tenant> {
  const alice = await createTenant(t, `alice-${tag()}`);
  await setTier(t, alice, 'team');
  const pack = await t.inject({
    method: 'PUT',
    url: '/v1/gateway/packs/ops',
    headers: asUser(alice),
    payload: { allowed_rails: ['ach'], quarantine_seconds: 0, dual_control_threshold_usd: '1000.00' },
  });
  expect(pack.statusCode).toBe(201);
  return alice;
}

let entity = 0;
const capsule = (over: Record<string, unknown> = {}) => ({
  entity_id: `E-${++entity}`,
  agent_id: 'buyer',
  pack_id: 'ops',
  rails: ['ach'],
  beneficiary: { details: PAYEE },
  amount_ceiling: { currency: 'USD', amount: '5000.00' },
  ttl_seconds: 600,
  ...over,
});

const mint = (headers: Record<string, string>, body: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/gateway/capsules', headers, payload: body });

/** Mints above the dual-control threshold: the approval it opens (409 dual_control_required). */
async function dualApproval(headers: Record<string, string>, body: Record<string, unknown>): Promise<string> {
  const res = await mint(headers, body);
  expectError(res, 409, 'dual_control_required');
  return res.json().error.approval_id as string;
}

const gatewayResolve = (headers: Record<string, string>, id: string, payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: `/v1/gateway/approvals/${id}/resolve`, headers, payload });

const state = async (tenant: Tenant, id: string) =>
  (await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: asUser(tenant) })).json();

const keyIdOf = async (key: string): Promise<string> => {
  const principal = await t.ctx.keys.authenticate(key);
  if (!principal) throw new Error('key does not authenticate');
  return principal.keyId;
};

const creatorOf = async (keyId: string) =>
  (
    await t.store.db
      .selectFrom('api_keys')
      .select('created_by')
      .where('id', '=', keyId)
      .executeTakeFirstOrThrow()
  ).created_by;

/**
 * A pending two-person approval of `tenant` as an older version (or one before migration 0030) wrote
 * it: no creator on the row, and one approval step through API key `step.keyId` without its creator.
 */
async function plantedApproval(
  tenant: Tenant,
  requester: { requestedBy?: string; requestedByKeyId?: string; requestedByLineageId?: string },
  step: { resolvedBy: string; keyId: string },
) {
  const row = pendingApprovalRow(
    { organizationId: tenant.orgId, projectId: tenant.projectId },
    {
      decisionId: null,
      toolName: 'wire',
      arguments: { amount: 5 },
      requestedByKeyId: requester.requestedByKeyId ?? null,
      requestedByLineageId: requester.requestedByLineageId ?? null,
      requestedBy: requester.requestedBy ?? null,
      requiredApprovals: 2,
    },
    new Date(),
  );
  const approvers = [
    {
      resolvedBy: step.resolvedBy,
      resolvedAt: new Date().toISOString(),
      byKeyId: step.keyId,
      byLineageId: step.keyId,
    },
  ];
  await t.store.db
    .insertInto('approvals')
    .values({ ...row, requested_by_key_creator: null, approvers: JSON.stringify(approvers) })
    .execute();
  return row;
}

describe('dual control counts the creator of an approver key as the person giving the step', () => {
  it('refuses the requester approving through their own keys, whatever names they relay (the hunt repro)', async () => {
    const alice = await organization();
    const body = capsule();
    const id = await dualApproval(asUser(alice), body);
    expectError(await gatewayResolve(asUser(alice), id, { action: 'approve' }), 403, 'authorization_error');
    const k1 = await createKey(t, alice, ['approvals:resolve'], 'a1');
    const k2 = await createKey(t, alice, ['approvals:resolve'], 'a2');
    for (const [key, name] of [
      [k1, 'bob'],
      [k2, 'carol'],
    ] as const) {
      const res = await gatewayResolve(keyHeader(key), id, { action: 'approve', resolvedBy: name });
      expectError(res, 403, 'authorization_error');
      expect(res.json().error.message).toMatch(
        new RegExp(`was created by ${alice.userId}, who requested approval ${id}: under dual control`),
      );
    }
    // Through /v1/approvals and batch-resolve alike.
    expectError(await resolveApproval(t, k1, id, 'approve', 'Alice'), 403, 'authorization_error');
    const batch = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: keyHeader(k2),
      payload: { ids: [id], action: 'approve', resolvedBy: 'dave' },
    });
    expect(batch.json().results).toEqual([
      expect.objectContaining({
        id,
        status: 'pending',
        error: expect.objectContaining({ code: 'authorization_error' }),
      }),
    ]);
    expect(await state(alice, id)).toMatchObject({ status: 'pending', approvers: [] });
    expectError(await mint(asUser(alice), { ...body, approval_ref: id }), 409, 'dual_control_required');

    // Two other people, one in person and one through a key she created herself: approved, minted.
    const bob = await addMember(t, alice, `bob-${tag()}`);
    const carol = await addMember(t, alice, `carol-${tag()}`);
    const carolsKey = await createKey(t, carol, ['approvals:resolve'], 'carol');
    expect((await gatewayResolve(asUser(bob), id, { action: 'approve' })).json().status).toBe('pending');
    const done = await gatewayResolve(keyHeader(carolsKey), id, {
      action: 'approve',
      resolvedBy: carol.userId,
    });
    expect(done.json()).toMatchObject({
      status: 'approved',
      approvers: [{ resolvedBy: bob.userId }, { resolvedBy: carol.userId }],
    });
    expect((await mint(asUser(alice), { ...body, approval_ref: id })).statusCode).toBe(201);
  });

  it('counts the creator of the key that requested as the requester', async () => {
    const alice = await organization();
    const agent = await createKey(t, alice, ['api'], 'agent');
    const body = capsule();
    const id = await dualApproval(keyHeader(agent), body);
    const stored = await createApprovalRepository(t.store.db).get(alice.orgId, id);
    expect(stored?.requested_by_key_creator).toBe(alice.userId);
    const own = await gatewayResolve(asUser(alice), id, { action: 'approve' });
    expectError(own, 403, 'authorization_error');
    expect(own.json().error.message).toContain(`${alice.userId} created API key`);
    const relay = await createKey(t, alice, ['approvals:resolve'], 'relay');
    expectError(await resolveApproval(t, relay, id, 'approve', 'Alice'), 403, 'authorization_error');
    expect(await state(alice, id)).toMatchObject({ status: 'pending', approvers: [] });
    // Other people approve; the agent mints.
    const bob = await addMember(t, alice, `bob-${tag()}`);
    const carol = await addMember(t, alice, `carol-${tag()}`);
    expect((await resolveApproval(t, bob, id, 'approve')).json().status).toBe('pending');
    expect((await resolveApproval(t, carol, id, 'approve')).json().status).toBe('approved');
    expect((await mint(keyHeader(agent), { ...body, approval_ref: id })).statusCode).toBe(201);
  });

  it('counts the keys of one creator, and a person and their own key, as one person', async () => {
    const alice = await organization();
    const bob = await addMember(t, alice, `bob-${tag()}`);
    const carol = await addMember(t, alice, `carol-${tag()}`);
    const [b1, b2] = [
      await createKey(t, bob, ['approvals:resolve'], 'b1'),
      await createKey(t, bob, ['approvals:resolve'], 'b2'),
    ];
    const id = await dualApproval(asUser(alice), capsule());
    expect((await resolveApproval(t, b1, id, 'approve', 'dave')).json().status).toBe('pending');
    // Another key of bob's (another lineage), relaying someone else: bob again.
    const second = await resolveApproval(t, b2, id, 'approve', 'erin');
    expectError(second, 409, 'approval_already_resolved');
    expect(second.json().error.message).toContain(`created by ${bob.userId}`);
    // Bob in person: bob again.
    const inPerson = await resolveApproval(t, bob, id, 'approve');
    expectError(inPerson, 409, 'approval_already_resolved');
    expect(inPerson.json().error.message).toContain('which they created');
    expect(await state(alice, id)).toMatchObject({ status: 'pending', approvers: [{ resolvedBy: 'dave' }] });
    expect((await resolveApproval(t, carol, id, 'approve')).json().status).toBe('approved');

    // The other way round: bob in person first, then a key of his relaying another name.
    const other = await dualApproval(asUser(alice), capsule());
    expect((await resolveApproval(t, bob, other, 'approve')).json().status).toBe('pending');
    const relayed = await resolveApproval(t, b1, other, 'approve', 'dave');
    expectError(relayed, 409, 'approval_already_resolved');
    expect(relayed.json().error.message).toContain(`${bob.userId}, who created API key`);
    // A key minted by bob's key is bob's too (a lineage keeps its root's creator).
    const parent = await createKey(t, bob, ['api', 'approvals:resolve'], 'parent');
    const child = await mintKey(t, alice, parent, ['approvals:resolve']);
    expect(await creatorOf(await keyIdOf(child))).toBe(bob.userId);
    expectError(await resolveApproval(t, child, other, 'approve', 'frank'), 409, 'approval_already_resolved');
    const carolsKey = await createKey(t, carol, ['approvals:resolve'], 'carol');
    expect((await resolveApproval(t, carolsKey, other, 'approve', 'frank')).json().status).toBe('approved');
  });

  it('lets no key without a recorded creator give a dual-control approval; it still denies and resolves one-person approvals', async () => {
    const alice = await organization();
    const old = await createKey(t, alice, ['approvals:resolve'], 'old');
    const oldId = await keyIdOf(old);
    // As a key made before creators were recorded reads (the principal is cached by keyIdOf: forget it).
    await t.store.db.updateTable('api_keys').set({ created_by: null }).where('id', '=', oldId).execute();
    t.ctx.keys.forgetKeys([oldId], false);
    const bob = await addMember(t, alice, `bob-${tag()}`);
    const id = await dualApproval(asUser(bob), capsule());
    const res = await resolveApproval(t, old, id, 'approve', 'carol');
    expectError(res, 403, 'authorization_error');
    expect(res.json().error.message).toMatch(/has no recorded creator/);
    expect(await state(alice, id)).toMatchObject({ status: 'pending', approvers: [] });
    expect((await resolveApproval(t, old, id, 'deny', 'carol')).json().status).toBe('denied');
    // A one-person approval is not under dual control: the key resolves it as before.
    const single = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: asUser(bob),
      payload: { toolName: 'wire', arguments: { amount: 5 } },
    });
    expect((await resolveApproval(t, old, single.json().id, 'approve', 'carol')).json().status).toBe(
      'approved',
    );
    // The automatic key of a project has no creator either (the service mints it).
    expect(await creatorOf(await keyIdOf(alice.apiKey))).toBeNull();
  });

  it("counts no step an older version recorded through the requester's own key: the approval cannot complete", async () => {
    const alice = await organization();
    const own = await createKey(t, alice, ['approvals:resolve'], 'own');
    const ownId = await keyIdOf(own);
    expect(await creatorOf(ownId)).toBe(alice.userId);
    // alice asks in person; an instance of an older version took alice's own key relaying "bob" as
    // the first of two people (it knew no creators, and wrote none on the step).
    const row = await plantedApproval(
      alice,
      { requestedBy: alice.userId },
      { resolvedBy: 'bob', keyId: ownId },
    );
    const carol = await addMember(t, alice, `carol-${tag()}`);
    const refused = await resolveApproval(t, carol, row.id, 'approve');
    expectError(refused, 403, 'authorization_error');
    expect(refused.json().error.message).toContain(
      `${alice.userId}, who requested it, gave through API key ${ownId}`,
    );
    expect((await state(alice, row.id)).status).toBe('pending');
    // A deny still ends it.
    expect((await resolveApproval(t, carol, row.id, 'deny')).json().status).toBe('denied');
  });

  it('reads the creators of approvals and steps recorded before they were, from the keys', async () => {
    const alice = await organization();
    const bob = await addMember(t, alice, `bob-${tag()}`);
    const agent = await createKey(t, alice, ['api'], 'agent');
    const agentId = await keyIdOf(agent);
    const b1 = await createKey(t, bob, ['approvals:resolve'], 'b1');
    const b1Id = await keyIdOf(b1);
    // As an older version (or one before migration 0030) wrote them: no creators on the row or the step.
    const row = await plantedApproval(
      alice,
      { requestedByKeyId: agentId, requestedByLineageId: agentId },
      { resolvedBy: 'dave', keyId: b1Id },
    );
    expectError(await resolveApproval(t, alice, row.id, 'approve'), 403, 'authorization_error');
    expectError(await resolveApproval(t, bob, row.id, 'approve'), 409, 'approval_already_resolved');
    const carol = await addMember(t, alice, `carol-${tag()}`);
    expect((await resolveApproval(t, carol, row.id, 'approve')).json()).toMatchObject({
      status: 'approved',
      approvers: [{ resolvedBy: 'dave' }, { resolvedBy: carol.userId }],
    });
  });
});
