import { beforeAll, describe, expect, it } from 'vitest';
import { approverKey, collectEvents, resolveApproval, setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';

let a: Tenant;
let b: Tenant;
let offset = 0;
const clock = { now: () => new Date(Date.now() + offset) };

const PAYEE = { name: 'Big Vendor', account_number: '123456' };
const PACK = { allowed_rails: ['ach'], approval_threshold_usd: '100', quarantine_seconds: 0 };
const DUAL_PACK = { ...PACK, dual_control_threshold_usd: '1000' };

const t = useTestApp({}, { clock });
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
  await setTier(t, a, 'team');
  await setTier(t, b, 'team');
  for (const x of [a, b]) {
    for (const [id, payload] of [
      ['big', PACK],
      ['dual', DUAL_PACK],
    ] as const) {
      const res = await t.inject({
        method: 'PUT',
        url: `/v1/gateway/packs/${id}`,
        headers: asUser(x),
        payload,
      });
      expect(res.statusCode).toBe(201);
    }
  }
});

const body = (over: Record<string, unknown> = {}) => ({
  entity_id: 'acme',
  agent_id: 'buyer',
  pack_id: 'big',
  rails: ['ach'],
  beneficiary: { details: PAYEE },
  amount_ceiling: { currency: 'USD', amount: '250.00' },
  ttl_seconds: 300,
  ...over,
});
const mint = (x: Tenant, over: Record<string, unknown> = {}) =>
  t.inject({
    method: 'POST',
    url: '/v1/gateway/capsules',
    headers: keyHeader(x.apiKey),
    payload: body(over),
  });

function errorOf(res: { statusCode: number; json(): unknown; body: string }, status: number, code: string) {
  const err = (res.json() as { error?: Record<string, unknown> }).error;
  if (res.statusCode !== status || err?.['code'] !== code) {
    throw new Error(`expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  }
  return err;
}

/** Mints above the threshold, answering the approval it opened. */
async function requireApproval(x: Tenant, over: Record<string, unknown> = {}) {
  const err = errorOf(await mint(x, over), 409, 'approval_required');
  expect(err['payload_hash']).toMatch(/^sha256:[0-9a-f]{64}$/);
  return { id: err['approval_id'] as string, hash: err['payload_hash'] as string };
}

describe('capsules under an approval', () => {
  it('opens an approval bound to the payload, and mints once it is approved, once', async () => {
    const ap = await requireApproval(a);
    const pending = await t.inject({ method: 'GET', url: `/v1/approvals/${ap.id}`, headers: asUser(a) });
    expect(pending.json()).toMatchObject({ status: 'pending', toolName: 'gateway.capsule' });
    expect(pending.json().arguments).toMatchObject({
      amount_ceiling: { currency: 'USD', amount: '250.00' },
      rail_allowlist: ['ach'],
    });
    // Still pending: the same approval is named again, no new one is opened.
    expect(errorOf(await mint(a, { approval_ref: ap.id }), 409, 'approval_required')['approval_id']).toBe(
      ap.id,
    );
    expect((await resolveApproval(t, a, ap.id, 'approve')).statusCode).toBe(200);
    const minted = await mint(a, { approval_ref: ap.id });
    expect(minted.statusCode).toBe(201);
    expect(minted.json().payload.approval_ref).toBe(ap.id);
    errorOf(await mint(a, { approval_ref: ap.id }), 409, 'approval_already_consumed');
    // Below the threshold no approval is needed.
    expect((await mint(a, { amount_ceiling: { currency: 'USD', amount: '99.99' } })).statusCode).toBe(201);
  });

  it('refuses an approval for another payload, a denied one, an expired one and one of another organization', async () => {
    const ap = await requireApproval(a);
    await resolveApproval(t, a, ap.id, 'approve');
    const other = errorOf(
      await mint(a, { approval_ref: ap.id, amount_ceiling: { currency: 'USD', amount: '251.00' } }),
      409,
      'approval_payload_mismatch',
    );
    expect(other['payload_hash']).toBe(ap.hash);

    const denied = await requireApproval(a, { entity_id: 'denied' });
    await resolveApproval(t, a, denied.id, 'deny');
    errorOf(await mint(a, { entity_id: 'denied', approval_ref: denied.id }), 403, 'approval_denied');

    const late = await requireApproval(a, { entity_id: 'late' });
    offset = 3600 * 1000 + 1000;
    try {
      errorOf(await mint(a, { entity_id: 'late', approval_ref: late.id }), 409, 'approval_expired');
    } finally {
      offset = 0;
    }
    errorOf(await mint(b, { approval_ref: ap.id }), 404, 'approval_not_found');
    // The approval of the first case is still usable by its own payload.
    expect((await mint(a, { approval_ref: ap.id })).statusCode).toBe(201);
  });

  it('lets exactly one of parallel mints use an approval', async () => {
    const ap = await requireApproval(a, { entity_id: 'parallel' });
    await resolveApproval(t, a, ap.id, 'approve');
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => mint(a, { entity_id: 'parallel', approval_ref: ap.id })),
    );
    expect(answers.filter((r) => r.statusCode === 201)).toHaveLength(1);
    for (const r of answers.filter((x) => x.statusCode !== 201)) errorOf(r, 409, 'approval_already_consumed');
  });
});

/** Another person of the tenant's organization, signed in with their own token. */
async function member(x: Tenant, userId: string): Promise<Tenant> {
  await t.store.db
    .insertInto('memberships')
    .values({
      organization_id: x.orgId,
      user_id: userId,
      role: 'member',
      created_at: new Date().toISOString(),
    })
    .execute();
  return { ...x, userId, token: await t.token(userId) };
}

let dualSeq = 0;
const dualBody = (over: Record<string, unknown> = {}) => ({
  pack_id: 'dual',
  entity_id: `dual-${++dualSeq}`,
  amount_ceiling: { currency: 'USD', amount: '1500.00' },
  ...over,
});
const getApproval = async (x: Tenant, id: string) =>
  (await t.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: asUser(x) })).json();
const gatewayResolve = (headers: Record<string, string>, id: string, payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: `/v1/gateway/approvals/${id}/resolve`, headers, payload });

describe('dual control', () => {
  it('needs two distinct people before the mint, each step with its receipt, one event', async () => {
    const over = dualBody();
    const err = errorOf(await mint(a, over), 409, 'dual_control_required');
    const id = err['approval_id'] as string;
    expect(err['payload_hash']).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(await getApproval(a, id)).toMatchObject({
      status: 'pending',
      requiredApprovals: 2,
      approvers: [],
    });
    const seen = collectEvents(t, a.orgId);
    const first = await resolveApproval(t, a, id, 'approve');
    expect(first.statusCode).toBe(200);
    expect(first.json()).toMatchObject({
      status: 'pending',
      resolvedBy: a.userId,
      requiredApprovals: 2,
      approvers: [{ resolvedBy: a.userId, resolvedAt: expect.any(String) }],
    });
    // One approval is not enough: the mint names the same approval again.
    const still = errorOf(await mint(a, { ...over, approval_ref: id }), 409, 'dual_control_required');
    expect(still['approval_id']).toBe(id);
    // The same person again, by token or through an approver key relaying them: refused, nothing changes.
    const again = await resolveApproval(t, a, id, 'approve');
    expect(again.statusCode).toBe(409);
    expect(again.json().error.code).toBe('approval_already_resolved');
    const relayed = await resolveApproval(t, a, id, 'approve', a.userId);
    expect(relayed.statusCode).toBe(409);
    expect(relayed.json().error.code).toBe('approval_already_resolved');
    expect(seen.events.filter((e) => e.type === 'approval.resolved')).toHaveLength(0);
    const second = await resolveApproval(t, a, id, 'approve', 'bob');
    expect(second.json()).toMatchObject({ status: 'approved', resolvedBy: 'bob' });
    seen.stop();
    expect(await getApproval(a, id)).toMatchObject({
      status: 'approved',
      requiredApprovals: 2,
      resolvedBy: 'bob',
      approvers: [{ resolvedBy: a.userId }, { resolvedBy: 'bob' }],
    });
    expect(seen.events.filter((e) => e.type === 'approval.resolved')).toHaveLength(1);
    const minted = await mint(a, { ...over, approval_ref: id });
    expect(minted.statusCode).toBe(201);
    expect(minted.json().payload.approval_ref).toBe(id);
    errorOf(await mint(a, { ...over, approval_ref: id }), 409, 'approval_already_consumed');
    const receipts = await t.store.db
      .selectFrom('receipts')
      .select('payload')
      .where('organization_id', '=', a.orgId)
      .execute();
    const steps = receipts
      .map((r) => JSON.parse(r.payload))
      .filter((r) => r.approval_id === id && r.decision === 'approval_approved');
    expect(steps.map((r) => r.reason)).toEqual([
      expect.stringContaining(`by ${a.userId} (1 of 2 approvals)`),
      expect.stringContaining('by bob through API key'),
    ]);
    expect(new Set(steps.map((r) => r.approval_hash)).size).toBe(2);
  });

  it('never counts the requester, nor one approver key relaying two people', async () => {
    const carol = await member(a, `carol-${dualSeq}`);
    const over = dualBody();
    const byCarol = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: asUser(carol),
      payload: body(over),
    });
    const id = errorOf(byCarol, 409, 'dual_control_required')['approval_id'] as string;
    expect((await resolveApproval(t, carol, id, 'approve')).statusCode).toBe(403);
    expect((await resolveApproval(t, a, id, 'approve', carol.userId)).statusCode).toBe(403);
    expect((await resolveApproval(t, a, id, 'approve', 'dave')).statusCode).toBe(200);
    const twice = await resolveApproval(t, a, id, 'approve', 'erin');
    expect(twice.statusCode).toBe(409);
    expect(twice.json().error).toMatchObject({ code: 'approval_already_resolved' });
    expect(await getApproval(a, id)).toMatchObject({
      status: 'pending',
      approvers: [{ resolvedBy: 'dave' }],
    });
    // A second person with their own token completes it.
    expect((await resolveApproval(t, a, id, 'approve')).json().status).toBe('approved');
    const res = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: asUser(carol),
      payload: body({ ...over, approval_ref: id }),
    });
    expect(res.statusCode).toBe(201);
  });

  it('is denied by one deny, and works through batch resolve', async () => {
    const d = dualBody();
    const denied = errorOf(await mint(a, d), 409, 'dual_control_required')['approval_id'] as string;
    await resolveApproval(t, a, denied, 'approve');
    expect((await resolveApproval(t, a, denied, 'deny', 'bob')).json()).toMatchObject({ status: 'denied' });
    errorOf(await mint(a, { ...d, approval_ref: denied }), 403, 'approval_denied');

    const [o1, o2] = [dualBody(), dualBody()];
    const ids = [
      errorOf(await mint(a, o1), 409, 'dual_control_required')['approval_id'] as string,
      errorOf(await mint(a, o2), 409, 'dual_control_required')['approval_id'] as string,
    ];
    const batch = (headers: Record<string, string>, resolvedBy?: string) =>
      t.inject({
        method: 'POST',
        url: '/v1/approvals/batch-resolve',
        headers,
        payload: { ids, action: 'approve', ...(resolvedBy ? { resolvedBy } : {}) },
      });
    const one = (await batch(asUser(a))).json().results;
    expect(one).toEqual(
      ids.map((id) =>
        expect.objectContaining({
          id,
          status: 'pending',
          requiredApprovals: 2,
          approvers: [expect.anything()],
        }),
      ),
    );
    const replay = (await batch(asUser(a))).json().results;
    expect(replay.map((r: { error: { code: string } }) => r.error.code)).toEqual([
      'approval_already_resolved',
      'approval_already_resolved',
    ]);
    const key = keyHeader(await approverKey(t, a));
    const two = (await batch(key, 'bob')).json().results;
    expect(two.map((r: { status: string }) => r.status)).toEqual(['approved', 'approved']);
    expect((await mint(a, { ...o1, approval_ref: ids[0] })).statusCode).toBe(201);
    expect((await mint(a, { ...o2, approval_ref: ids[1] })).statusCode).toBe(201);
  });

  it('counts concurrent approvals of two people both, and one person once', async () => {
    const over = dualBody();
    const id = errorOf(await mint(a, over), 409, 'dual_control_required')['approval_id'] as string;
    const same = await Promise.all([1, 2, 3].map(() => resolveApproval(t, a, id, 'approve')));
    expect(same.map((r) => r.statusCode).sort()).toEqual([200, 409, 409]);
    expect(await getApproval(a, id)).toMatchObject({
      status: 'pending',
      approvers: [{ resolvedBy: a.userId }],
    });
    const other = dualBody();
    const both = errorOf(await mint(a, other), 409, 'dual_control_required')['approval_id'] as string;
    const answers = await Promise.all([
      resolveApproval(t, a, both, 'approve'),
      resolveApproval(t, a, both, 'approve', 'bob'),
    ]);
    expect(answers.map((r) => r.statusCode)).toEqual([200, 200]);
    const after = await getApproval(a, both);
    expect(after.status).toBe('approved');
    expect(after.approvers.map((x: { resolvedBy: string }) => x.resolvedBy).sort()).toEqual(
      [a.userId, 'bob'].sort(),
    );
    expect((await mint(a, { ...other, approval_ref: both })).statusCode).toBe(201);
  });

  it('refuses a one-person approval for a capsule under dual control', async () => {
    const over = dualBody();
    const dualId = errorOf(await mint(a, over), 409, 'dual_control_required')['approval_id'] as string;
    const args = (await getApproval(a, dualId)).arguments;
    const single = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: asUser(a),
      payload: { toolName: 'gateway.capsule', arguments: args },
    });
    const singleId = single.json().id as string;
    expect((await resolveApproval(t, a, singleId, 'approve', 'bob')).json().status).toBe('approved');
    errorOf(await mint(a, { ...over, approval_ref: singleId }), 409, 'approval_payload_mismatch');
  });
});

describe('POST /v1/gateway/approvals/:id/resolve', () => {
  it('resolves a capsule approval; a replay is approval_already_resolved (envelope B)', async () => {
    const ap = await requireApproval(a, { entity_id: 'gw-resolve' });
    const ok = await gatewayResolve(asUser(a), ap.id, { action: 'approve' });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ id: ap.id, status: 'approved', resolvedBy: a.userId });
    const replay = errorOf(
      await gatewayResolve(asUser(a), ap.id, { action: 'deny' }),
      409,
      'approval_already_resolved',
    );
    expect(replay['doc_url']).toMatch(/\/errors\/approval_already_resolved$/);
    expect((await getApproval(a, ap.id)).status).toBe('approved');

    // Under dual control the same person twice is a replay too.
    const id = errorOf(await mint(a, dualBody()), 409, 'dual_control_required')['approval_id'] as string;
    expect((await gatewayResolve(asUser(a), id, { action: 'approve' })).json().status).toBe('pending');
    errorOf(await gatewayResolve(asUser(a), id, { action: 'approve' }), 409, 'approval_already_resolved');
    const key = keyHeader(await approverKey(t, a));
    expect((await gatewayResolve(key, id, { action: 'approve', resolvedBy: 'bob' })).json().status).toBe(
      'approved',
    );
  });

  it('answers envelope-B errors: unknown, another organization, not a capsule approval, expired, bad body', async () => {
    const unknown = '01900000-0000-7000-8000-000000000000';
    errorOf(await gatewayResolve(asUser(a), unknown, { action: 'approve' }), 404, 'approval_not_found');
    const ap = await requireApproval(a, { entity_id: 'gw-foreign' });
    errorOf(await gatewayResolve(asUser(b), ap.id, { action: 'approve' }), 404, 'approval_not_found');
    const plain = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: asUser(a),
      payload: { toolName: 'wire', arguments: {} },
    });
    errorOf(
      await gatewayResolve(asUser(a), plain.json().id, { action: 'approve' }),
      404,
      'approval_not_found',
    );
    errorOf(await gatewayResolve(asUser(a), ap.id, { action: 'maybe' }), 400, 'invalid_request');
    errorOf(
      await gatewayResolve(keyHeader(a.apiKey), ap.id, { action: 'approve' }),
      403,
      'authorization_error',
    );
    const late = await requireApproval(a, { entity_id: 'gw-late' });
    offset = 3600 * 1000 + 1000;
    try {
      errorOf(await gatewayResolve(asUser(a), late.id, { action: 'approve' }), 409, 'approval_expired');
    } finally {
      offset = 0;
    }
    expect((await getApproval(a, ap.id)).status).toBe('pending');
  });
});

describe('the same mint sent again', () => {
  it('names the approval it opened instead of opening another: one approval, one capsule', async () => {
    const over = { entity_id: 'resent' };
    const events = collectEvents(t, a.orgId);
    const first = await requireApproval(a, over);
    const again = await requireApproval(a, over);
    events.stop();
    expect(again).toEqual(first);
    expect(events.events.filter((e) => e.type === 'approval.created')).toHaveLength(1);
    expect((await resolveApproval(t, a, first.id, 'approve')).statusCode).toBe(200);
    // Approved and unused: a mint without approval_ref is pointed at it.
    const approved = errorOf(await mint(a, over), 409, 'approval_required');
    expect(approved['approval_id']).toBe(first.id);
    expect(approved['message']).toMatch(/is approved: mint again with approval_ref/);
    expect((await mint(a, { ...over, approval_ref: first.id })).statusCode).toBe(201);
    // Used: the next mint of the same payload asks for a new approval.
    const next = await requireApproval(a, over);
    expect(next.id).not.toBe(first.id);
    expect(next.hash).toBe(first.hash);
  });

  it('opens one approval for concurrent mints of one payload; another requester gets its own', async () => {
    const over = { entity_id: 'resent-parallel' };
    const answers = await Promise.all(Array.from({ length: 6 }, () => mint(a, over)));
    const ids = new Set(answers.map((r) => errorOf(r, 409, 'approval_required')['approval_id']));
    expect(ids.size).toBe(1);
    // A person minting the same payload is another requester: their approval is their own.
    const byPerson = errorOf(
      await t.inject({
        method: 'POST',
        url: '/v1/gateway/capsules',
        headers: asUser(a),
        payload: body(over),
      }),
      409,
      'approval_required',
    )['approval_id'];
    expect(ids.has(byPerson as string)).toBe(false);
    // Dual control too: the same mint names the same approval.
    const dual = dualBody();
    const d1 = errorOf(await mint(a, dual), 409, 'dual_control_required')['approval_id'];
    const d2 = errorOf(await mint(a, dual), 409, 'dual_control_required')['approval_id'];
    expect(d2).toBe(d1);
  });
});

describe('an approved mint approval', () => {
  it('is usable within its TTL counted from its approval, then answers approval_expired', async () => {
    const over = { entity_id: 'use-by' };
    const ap = await requireApproval(a, over);
    try {
      // Approved 50 minutes after it was opened (TTL 3600 s): usable until 60 minutes after that.
      offset = 3000 * 1000;
      await resolveApproval(t, a, ap.id, 'approve');
      offset = (3000 + 3500) * 1000;
      expect((await mint(a, { ...over, approval_ref: ap.id })).statusCode).toBe(201);

      const late = await requireApproval(a, { entity_id: 'use-by-late' });
      await resolveApproval(t, a, late.id, 'approve');
      offset += 3600 * 1000 + 1000;
      const refused = errorOf(
        await mint(a, { entity_id: 'use-by-late', approval_ref: late.id }),
        409,
        'approval_expired',
      );
      expect(refused['param']).toBe('approval_ref');
      // Nothing used it: it stays approved and unused, and a new mint asks for a new approval.
      expect((await getApproval(a, late.id)).status).toBe('approved');
      const fresh = await requireApproval(a, { entity_id: 'use-by-late' });
      expect(fresh.id).not.toBe(late.id);

      offset += 30 * 86_400 * 1000;
      errorOf(await mint(a, { entity_id: 'use-by-late', approval_ref: late.id }), 409, 'approval_expired');
    } finally {
      offset = 0;
    }
  });
});

describe('the same mint on two instances', () => {
  const one = useTestApp();
  const two = useTestApp({}, () => ({ database: one.database }));

  it('opens one approval between them', async () => {
    const x = await createTenant(one);
    await setTier(one, x, 'team');
    expect(
      (await one.inject({ method: 'PUT', url: '/v1/gateway/packs/big', headers: asUser(x), payload: PACK }))
        .statusCode,
    ).toBe(201);
    const send = (app: typeof one) =>
      app.inject({
        method: 'POST',
        url: '/v1/gateway/capsules',
        headers: keyHeader(x.apiKey),
        payload: body({ entity_id: 'two-instances' }),
      });
    const answers = await Promise.all([one, two, one, two, one, two].map(send));
    const ids = new Set(answers.map((r) => errorOf(r, 409, 'approval_required')['approval_id']));
    expect(ids.size).toBe(1);
  });
});
