import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import {
  approverKey,
  collectEvents,
  createKey,
  mintKey,
  openApproval,
  receiptsOf,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { approvalHash } from './model.js';

const t = useTestApp();

const UNKNOWN = '00000000-0000-7000-8000-000000000000';

async function teamTenant(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
  return tenant;
}

async function pendingId(tenant: Tenant, body: Record<string, unknown> = {}): Promise<string> {
  const res = await openApproval(t, tenant, { toolName: 'wire', arguments: { amount: 5 }, ...body });
  if (res.statusCode !== 201) throw new Error(res.body);
  return res.json().id;
}

describe('POST /v1/approvals', () => {
  it('opens a pending approval with the default TTL and announces it', async () => {
    const tenant = await teamTenant();
    const seen = collectEvents(t, tenant.orgId);
    const res = await openApproval(t, tenant, { toolName: 'wire', arguments: { amount: 5 } });
    seen.stop();
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['createdAt', 'expiresAt', 'id', 'status', 'toolName']);
    expect(body).toMatchObject({ toolName: 'wire', status: 'pending' });
    expect(Date.parse(body.expiresAt) - Date.parse(body.createdAt)).toBe(3600_000);
    expect(seen.events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'approval.created',
        data: { approvalId: body.id, toolName: 'wire', decisionId: null },
      },
    ]);
    const ttl = await openApproval(t, tenant, { toolName: 'wire', expiresInSeconds: 60 });
    expect(Date.parse(ttl.json().expiresAt) - Date.parse(ttl.json().createdAt)).toBe(60_000);
  });

  it('links a decision of the organization, defaulting to its arguments', async () => {
    const tenant = await teamTenant();
    const decided = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'wire', arguments: { amount: 7 } },
    });
    const decisionId = decided.json().metadata.decision_id;
    const res = await openApproval(t, tenant, { toolName: 'wire', decisionId });
    expect(res.statusCode).toBe(201);
    const got = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${res.json().id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(got.json()).toMatchObject({ decisionId, arguments: { amount: 7 } });

    expectError(await openApproval(t, tenant, { toolName: 'other', decisionId }), 400, 'validation_failed');
    // Linked, it shows that decision's escalation: it must bind that call's arguments.
    const moved = await openApproval(t, tenant, { toolName: 'wire', decisionId, arguments: { amount: 999 } });
    expectError(moved, 400, 'validation_failed');
    expect(moved.json().error.message).toContain('body/arguments differ');
    const same = await openApproval(t, tenant, { toolName: 'wire', decisionId, arguments: { amount: 7 } });
    expect(same.statusCode).toBe(201);
    expectError(await openApproval(t, tenant, { toolName: 'wire', decisionId: UNKNOWN }), 404, 'not_found');
    const b = await teamTenant();
    expectError(await openApproval(t, b, { toolName: 'wire', decisionId }), 404, 'not_found');
  });

  it.each([
    [{ arguments: {} }, 'toolName'],
    [{ toolName: '' }, 'toolName'],
    [{ toolName: 'x', expiresInSeconds: 59 }, 'expiresInSeconds'],
    [{ toolName: 'x', expiresInSeconds: 86_401 }, 'expiresInSeconds'],
    [{ toolName: 'x', decisionId: 'nope' }, 'decisionId'],
    [{ toolName: 'x', arguments: [1] }, 'arguments'],
  ])('rejects %j with 400 naming the field', async (payload, field) => {
    const tenant = await teamTenant();
    const res = await openApproval(t, tenant, payload);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
  });

  it('needs the Team plan: a free organization gets 429 plan_limit_exceeded, by key or user', async () => {
    const tenant = await createTenant(t);
    const res = await openApproval(t, tenant, { toolName: 'wire' });
    expectError(res, 429, 'plan_limit_exceeded');
    expect(res.json().error.message).toMatch(/Team plan/);
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/approvals',
        headers: asUser(tenant),
        payload: { toolName: 'wire' },
      }),
      429,
      'plan_limit_exceeded',
    );
    await setTier(t, tenant, 'business');
    const asUserOk = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: asUser(tenant),
      payload: { toolName: 'wire' },
    });
    expect(asUserOk.statusCode).toBe(201);
    expect((await openApproval(t, tenant, { toolName: 'wire' })).statusCode).toBe(201);
  });
});

describe('GET /v1/approvals/pending and /:id', () => {
  it('lists the pending approvals of the organization, oldest first', async () => {
    const tenant = await teamTenant();
    const first = await pendingId(tenant, { arguments: { n: 1 } });
    const second = await pendingId(tenant, { arguments: { n: 2 } });
    const done = await pendingId(tenant);
    await resolveApproval(t, tenant, done, 'deny');
    const res = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(tenant) });
    expect(res.statusCode).toBe(200);
    expect(res.json().data).toEqual([
      expect.objectContaining({ id: first, toolName: 'wire', arguments: { n: 1 }, status: 'pending' }),
      expect.objectContaining({ id: second, arguments: { n: 2 } }),
    ]);
    expect(Object.keys(res.json().data[0]).sort()).toEqual([
      'approvers',
      'arguments',
      'createdAt',
      'expiresAt',
      'id',
      'requiredApprovals',
      'status',
      'toolName',
    ]);
  });

  it('shows each state with its fields: pending, approved, denied', async () => {
    const tenant = await teamTenant();
    const id = await pendingId(tenant);
    const get = () =>
      t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: keyHeader(tenant.apiKey) });
    const pending = (await get()).json();
    expect(pending).toEqual({
      id,
      status: 'pending',
      toolName: 'wire',
      decisionId: null,
      arguments: { amount: 5 },
      createdAt: expect.any(String),
      expiresAt: expect.any(String),
      requiredApprovals: 1,
      approvers: [],
    });
    await resolveApproval(t, tenant, id, 'approve', 'bob');
    const approved = (await get()).json();
    expect(approved).toEqual({
      id,
      status: 'approved',
      toolName: 'wire',
      decisionId: null,
      createdAt: pending.createdAt,
      resolvedBy: 'bob',
      resolvedAt: expect.any(String),
      resolvedByKeyId: expect.any(String),
      requiredApprovals: 1,
      approvers: [{ resolvedBy: 'bob', resolvedAt: expect.any(String) }],
    });
    const other = await pendingId(tenant);
    await resolveApproval(t, tenant, other, 'deny', 'carol');
    const denied = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${other}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(denied.json()).toMatchObject({ status: 'denied', resolvedBy: 'carol' });
    const third = await pendingId(tenant);
    await resolveApproval(t, tenant, third, 'approve');
    const byUser = await t.inject({ method: 'GET', url: `/v1/approvals/${third}`, headers: asUser(tenant) });
    expect(byUser.json()).toMatchObject({ resolvedBy: tenant.userId, resolvedByKeyId: null });
    expect(denied.json().arguments).toBeUndefined();
  });

  it('answers 404 for unknown ids and for ids of another organization', async () => {
    const a = await teamTenant();
    const b = await teamTenant();
    const id = await pendingId(a);
    for (const url of [`/v1/approvals/${UNKNOWN}`, '/v1/approvals/not-a-uuid', `/v1/approvals/${id}`]) {
      expectError(await t.inject({ method: 'GET', url, headers: keyHeader(b.apiKey) }), 404, 'not_found');
    }
    expectError(
      await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: asUser(b) }),
      404,
      'not_found',
    );
    const list = await t.inject({
      method: 'GET',
      url: '/v1/approvals/pending',
      headers: keyHeader(b.apiKey),
    });
    expect(list.json().data).toEqual([]);
  });
});

describe('POST /v1/approvals/:id/resolve', () => {
  it('approves once, announces it and chains a resolution receipt', async () => {
    const tenant = await teamTenant();
    const id = await pendingId(tenant);
    const seen = collectEvents(t, tenant.orgId);
    const res = await resolveApproval(t, tenant, id, 'approve', 'alice');
    seen.stop();
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      id,
      status: 'approved',
      resolvedBy: 'alice',
      resolvedAt: expect.any(String),
      requiredApprovals: 1,
      approvers: [{ resolvedBy: 'alice', resolvedAt: res.json().resolvedAt }],
    });
    expect(seen.events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'approval.resolved',
        data: { approvalId: id, action: 'approve', resolvedBy: 'alice' },
      },
    ]);
    const chain = await receiptsOf(t, tenant.orgId);
    const last = JSON.parse(chain.at(-1)!);
    expect(last).toMatchObject({
      decision: 'approval_approved',
      decision_id: null,
      approval_id: id,
      approval_hash: approvalHash(id, 'approve', 'alice'),
      tool_name: 'wire',
      timestamp: res.json().resolvedAt,
    });
    expect((await verifyReceipts(chain)).ok).toBe(true);

    const again = await resolveApproval(t, tenant, id, 'deny');
    expectError(again, 400, 'invalid_status');
    expect(again.json().error.message).toMatch(/approved/);
  });

  it('denies, with a user token too', async () => {
    const tenant = await teamTenant();
    const id = await pendingId(tenant);
    const res = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: asUser(tenant),
      payload: { action: 'deny', resolvedBy: tenant.userId },
    });
    expect(res.json()).toMatchObject({ status: 'denied', resolvedBy: tenant.userId });
    const last = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(last).toMatchObject({ decision: 'approval_denied', approval_id: id });
  });

  it('lets exactly one of many concurrent resolves win', async () => {
    const tenant = await teamTenant();
    const id = await pendingId(tenant);
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        resolveApproval(t, tenant, id, i % 2 ? 'approve' : 'deny', `r${i}`),
      ),
    );
    const wins = results.filter((r) => r.statusCode === 200);
    expect(wins).toHaveLength(1);
    for (const r of results.filter((x) => x.statusCode !== 200)) expectError(r, 400, 'invalid_status');
    const resolutions = (await receiptsOf(t, tenant.orgId)).filter((p) => JSON.parse(p).approval_id === id);
    expect(resolutions).toHaveLength(1);
  });

  it('answers 404 for unknown and foreign ids, 400 for a bad body', async () => {
    const a = await teamTenant();
    const b = await teamTenant();
    const id = await pendingId(a);
    expectError(await resolveApproval(t, await approverKey(t, b), id, 'approve'), 404, 'not_found');
    expectError(await resolveApproval(t, b, id, 'approve'), 404, 'not_found');
    expectError(await resolveApproval(t, await approverKey(t, a), UNKNOWN, 'approve'), 404, 'not_found');
    expectError(await resolveApproval(t, a, id, 'maybe'), 400, 'validation_failed');
    expectError(await resolveApproval(t, a, id, 'approve', ''), 400, 'validation_failed');
    expectError(await resolveApproval(t, a, id, 'approve', 'x'.repeat(201)), 400, 'validation_failed');
    expectError(await resolveApproval(t, a, id, 'approve', 'bob\u0001'), 400, 'validation_failed');
    const still = await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: keyHeader(a.apiKey) });
    expect(still.json().status).toBe('pending');
  });
});

describe('who may resolve', () => {
  it('a user of the organization resolves as the token sub; a body naming someone else is refused', async () => {
    const tenant = await teamTenant();
    const id = await pendingId(tenant);
    const as = (payload: Record<string, unknown>) =>
      t.inject({ method: 'POST', url: `/v1/approvals/${id}/resolve`, headers: asUser(tenant), payload });
    const impersonating = await as({ action: 'approve', resolvedBy: 'ceo' });
    expectError(impersonating, 403, 'authorization_error');
    expect(impersonating.json().error.message).toMatch(/not the signed-in user/);
    const res = await as({ action: 'approve' });
    expect(res.json()).toMatchObject({ status: 'approved', resolvedBy: tenant.userId });
    const last = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(last.approval_hash).toBe(approvalHash(id, 'approve', tenant.userId));
    const batch = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: asUser(tenant),
      payload: { ids: [await pendingId(tenant)], action: 'deny', resolvedBy: 'ceo' },
    });
    expectError(batch, 403, 'authorization_error');
  });

  it('a user who is not a member gets 403 and changes nothing', async () => {
    const a = await teamTenant();
    const b = await teamTenant();
    const id = await pendingId(a);
    const res = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: { authorization: `Bearer ${b.token}`, 'x-organization-id': a.orgId },
      payload: { action: 'approve' },
    });
    expectError(res, 403, 'authorization_error');
    const still = await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: asUser(a) });
    expect(still.json().status).toBe('pending');
  });

  it('an agent key (scope api) cannot resolve, alone or in a batch', async () => {
    const tenant = await teamTenant();
    const reviewerKey = await createKey(t, tenant, ['api'], 'other agent');
    const id = await pendingId(tenant);
    for (const key of [tenant.apiKey, reviewerKey]) {
      const single = await resolveApproval(t, key, id, 'approve');
      expectError(single, 403, 'authorization_error');
      expect(single.json().error.message).toMatch(/approvals:resolve/);
      expectError(
        await t.inject({
          method: 'POST',
          url: '/v1/approvals/batch-resolve',
          headers: keyHeader(key),
          payload: { ids: [id], action: 'approve', resolvedBy: 'x' },
        }),
        403,
        'authorization_error',
      );
    }
    const still = await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: asUser(tenant) });
    expect(still.json().status).toBe('pending');
  });

  it('an approver key relays a named person, is recorded beside the name, and reads what it decides', async () => {
    const tenant = await teamTenant();
    const key = await approverKey(t, tenant);
    const id = await pendingId(tenant);
    const pending = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: keyHeader(key) });
    expect(pending.json().data.map((a: { id: string }) => a.id)).toContain(id);
    const unnamed = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: keyHeader(key),
      payload: { action: 'approve' },
    });
    expectError(unnamed, 400, 'validation_failed');
    expect(unnamed.json().error.message).toMatch(/resolvedBy/);
    const res = await resolveApproval(t, key, id, 'approve', 'chat:U42');
    expect(res.json()).toMatchObject({ status: 'approved', resolvedBy: 'chat:U42' });
    const keys = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) })).json()
      .data;
    const keyId = keys.find((k: { name: string }) => k.name === 'approver').id;
    const got = await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: keyHeader(key) });
    expect(got.json()).toMatchObject({ resolvedBy: 'chat:U42', resolvedByKeyId: keyId });
    const last = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(last.reason).toBe(`Approval ${id} approved by chat:U42 through API key ${keyId}`);
    // An approver-only key does nothing else.
    for (const [method, url] of [
      ['POST', '/v1/tools/validate'],
      ['GET', '/v1/policies'],
      ['GET', '/v1/api-keys'],
      ['GET', '/v1/decisions'],
    ] as const) {
      expectError(
        await t.inject({
          method,
          url,
          headers: keyHeader(key),
          ...(method === 'POST' ? { payload: {} } : {}),
        }),
        403,
        'authorization_error',
      );
    }
  });

  it('a key never resolves an approval it requested, even with the approver scope (also in a batch)', async () => {
    const tenant = await teamTenant();
    const both = await createKey(t, tenant, ['api', 'approvals:resolve'], 'agent and approver');
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(both),
      payload: {
        toolName: 'wire',
        constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      },
    });
    const v = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(both),
      payload: { tool_name: 'wire', arguments: { amount: 50 } },
    });
    expect(v.json().decision).toBe('require_approval');
    const escalated = v.json().approval_id as string;
    const requested = await pendingId({ ...tenant, apiKey: both });
    const byOther = await pendingId(tenant);
    const self = await resolveApproval(t, both, escalated, 'approve');
    expectError(self, 403, 'authorization_error');
    expect(self.json().error.message).toBe('an API key cannot resolve an approval it requested');
    const batch = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: keyHeader(both),
      payload: { ids: [escalated, requested, byOther], action: 'approve', resolvedBy: 'agent' },
    });
    expect(batch.json().results).toEqual([
      {
        id: escalated,
        status: 'pending',
        error: { code: 'authorization_error', message: expect.any(String) },
      },
      {
        id: requested,
        status: 'pending',
        error: { code: 'authorization_error', message: expect.any(String) },
      },
      expect.objectContaining({ id: byOther, status: 'approved', resolvedBy: 'agent', requiredApprovals: 1 }),
    ]);
    expect(
      (await resolveApproval(t, await approverKey(t, tenant), escalated, 'approve', 'bob')).statusCode,
    ).toBe(200);
    expect((await resolveApproval(t, tenant, requested, 'deny')).statusCode).toBe(200);
  });

  it('nor does a key it minted, the key that minted it, or a sibling: keys a key mints share its lineage', async () => {
    const tenant = await teamTenant();
    const both = await createKey(t, tenant, ['api', 'approvals:resolve'], 'agent and approver');
    const mint = (by: string, scopes: string[]) => mintKey(t, tenant, by, scopes);
    const child = await mint(both, ['approvals:resolve']);
    const agent = await mint(both, ['api']);
    const grandchild = await mint(agent, ['api']);
    // What the key asked for, its approver child cannot resolve.
    const own = await pendingId({ ...tenant, apiKey: both });
    const byChild = await resolveApproval(t, child, own, 'approve');
    expectError(byChild, 403, 'authorization_error');
    expect(byChild.json().error.message).toMatch(
      /^an API key cannot resolve an approval a key of its lineage requested/,
    );
    // What keys it minted ask for (down to a grandchild), neither it nor a sibling resolves.
    const fromAgent = await pendingId({ ...tenant, apiKey: agent });
    const fromGrandchild = await pendingId({ ...tenant, apiKey: grandchild });
    for (const [by, id] of [
      [both, fromAgent],
      [child, fromAgent],
      [both, fromGrandchild],
      [child, fromGrandchild],
    ] as const) {
      expectError(await resolveApproval(t, by, id, 'approve'), 403, 'authorization_error');
    }
    // An approver key a person made is of another lineage, and a person may resolve any.
    const approver = await approverKey(t, tenant);
    expect((await resolveApproval(t, approver, own, 'approve', 'bob')).statusCode).toBe(200);
    expect((await resolveApproval(t, approver, fromAgent, 'deny', 'bob')).statusCode).toBe(200);
    expect((await resolveApproval(t, tenant, fromGrandchild, 'approve')).statusCode).toBe(200);
    // The lineage's approver key still resolves what other lineages asked for.
    expect((await resolveApproval(t, child, await pendingId(tenant), 'approve')).statusCode).toBe(200);
  });
});

describe('POST /v1/approvals/batch-resolve', () => {
  it('reports every id: resolved, not_found, invalid_status', async () => {
    const a = await teamTenant();
    const b = await teamTenant();
    const [p1, p2, done] = [await pendingId(a), await pendingId(a), await pendingId(a)];
    await resolveApproval(t, a, done, 'approve');
    const foreign = await pendingId(b);
    const seen = collectEvents(t, a.orgId);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: keyHeader(await approverKey(t, a)),
      payload: { ids: [p1, UNKNOWN, done, foreign, p2], action: 'deny', resolvedBy: 'ops' },
    });
    seen.stop();
    expect(res.statusCode).toBe(200);
    const results = res.json().results;
    expect(results).toEqual([
      expect.objectContaining({ id: p1, status: 'denied', resolvedBy: 'ops', approvers: [] }),
      { id: UNKNOWN, status: 'not_found', error: { code: 'not_found', message: expect.any(String) } },
      { id: done, status: 'approved', error: { code: 'invalid_status', message: expect.any(String) } },
      { id: foreign, status: 'not_found', error: { code: 'not_found', message: expect.any(String) } },
      expect.objectContaining({ id: p2, status: 'denied', resolvedBy: 'ops', approvers: [] }),
    ]);
    expect(seen.events.map((e) => e.data.approvalId)).toEqual([p1, p2]);
    const chain = await receiptsOf(t, a.orgId);
    expect(chain.map((p) => JSON.parse(p).approval_id).filter((x) => x === p1 || x === p2)).toHaveLength(2);
    expect((await verifyReceipts(chain)).ok).toBe(true);
    const untouched = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${foreign}`,
      headers: keyHeader(b.apiKey),
    });
    expect(untouched.json().status).toBe('pending');
  });

  it.each([
    [{ ids: [], action: 'approve', resolvedBy: 'x' }],
    [{ ids: Array.from({ length: 101 }, () => UNKNOWN), action: 'approve', resolvedBy: 'x' }],
    [{ ids: ['nope'], action: 'approve', resolvedBy: 'x' }],
    [{ ids: [UNKNOWN], action: 'ok', resolvedBy: 'x' }],
    [{ ids: [UNKNOWN], action: 'approve' }],
  ])('rejects %j with 400', async (payload) => {
    const tenant = await teamTenant();
    const res = await t.inject({
      method: 'POST',
      url: '/v1/approvals/batch-resolve',
      headers: keyHeader(await approverKey(t, tenant)),
      payload,
    });
    expectError(res, 400, 'validation_failed');
  });
});
