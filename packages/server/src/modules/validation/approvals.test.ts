import type { Constraint, SessionConstraints } from '@svc/policy-engine';
import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import {
  collectEvents,
  ManualClock,
  openApproval,
  receiptsOf,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { bearer, createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';

const clock = new ManualClock();
const t = useTestApp({}, { clock });

const ESCALATE: Constraint = {
  argumentName: 'amount',
  enabled: true,
  maximum: 10,
  action: 'require_approval',
};

async function teamTenantWithPolicy(
  constraints: Constraint[] = [ESCALATE],
  sessionConstraints?: SessionConstraints,
): Promise<Tenant> {
  const tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
  const res = await t.inject({
    method: 'POST',
    url: '/v1/policies',
    headers: keyHeader(tenant.apiKey),
    payload: { toolName: 'wire', mode: 'deterministic', constraints, sessionConstraints },
  });
  if (res.statusCode !== 201) throw new Error(res.body);
  return tenant;
}

const validate = (tenant: Tenant, args: Record<string, unknown>, context: Record<string, unknown> = {}) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: 'wire', arguments: args, context },
  });

/** validate → require_approval → approve; returns the approval id. */
async function approved(tenant: Tenant, args: Record<string, unknown>, by = 'alice'): Promise<string> {
  const esc = await validate(tenant, args);
  expect(esc.json().decision).toBe('require_approval');
  const id = esc.json().approval_id as string;
  expect((await resolveApproval(t, tenant, id, 'approve', by)).statusCode).toBe(200);
  return id;
}

const usedAt = async (id: string) =>
  (await t.store.db.selectFrom('approvals').select('used_at').where('id', '=', id).executeTakeFirstOrThrow())
    .used_at;

describe('an approval across projects', () => {
  it("is used only by its own project's keys: another project's key finds none and uses nothing", async () => {
    const tenant = await teamTenantWithPolicy();
    const id = await approved(tenant, { amount: 501 });
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { authorization: `Bearer ${tenant.token}` },
      payload: { name: 'other', organizationId: tenant.orgId },
    });
    const other = { ...tenant, apiKey: second.json().apiKey as string };
    const taken = await validate(other, { amount: 501 }, { approval_id: id });
    expect(taken.json()).toMatchObject({ decision: 'deny' });
    expect(taken.json().reason).toMatch(`approval ${id} was not found`);
    expect(await usedAt(id)).toBeNull();
    // Its own project's call still gets it.
    const own = await validate(tenant, { amount: 501 }, { approval_id: id });
    expect(own.json()).toMatchObject({ decision: 'allow' });
  });
});

describe('require_approval through POST /v1/tools/validate', () => {
  it('opens an approval linked to the recorded decision, then allows the approved call exactly once', async () => {
    const tenant = await teamTenantWithPolicy();
    const seen = collectEvents(t, tenant.orgId);
    const esc = await validate(tenant, { amount: 50 });
    const body = esc.json();
    expect(body).toMatchObject({ decision: 'require_approval', approval_id: expect.any(String) });
    expect(body.reason).toMatch(/amount/);
    expect(body.failed_constraints).toHaveLength(1);
    const decisionId = body.metadata.decision_id;
    expect(seen.events.map((e) => [e.type, e.data.decisionId])).toEqual([
      ['decision.created', decisionId],
      ['approval.created', decisionId],
    ]);
    expect(seen.events[1]!.data).toEqual({ approvalId: body.approval_id, toolName: 'wire', decisionId });

    const decision = await t.store.db
      .selectFrom('decisions')
      .selectAll()
      .where('id', '=', decisionId)
      .executeTakeFirstOrThrow();
    expect(decision.decision).toBe('require_approval');
    const receipt = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(receipt).toMatchObject({
      decision_id: decisionId,
      decision: 'require_approval',
      approval_id: body.approval_id,
    });
    const approval = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${body.approval_id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(approval.json()).toMatchObject({ status: 'pending', decisionId, arguments: { amount: 50 } });
    expect(Date.parse(approval.json().expiresAt) - Date.parse(approval.json().createdAt)).toBe(3600_000);

    const early = await validate(tenant, { amount: 50 }, { approval_id: body.approval_id });
    expect(early.json()).toMatchObject({ decision: 'deny' });
    expect(early.json().reason).toMatch(/still pending/);

    await resolveApproval(t, tenant, body.approval_id, 'approve', 'alice');
    const resolution = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(resolution).toMatchObject({ decision: 'approval_approved', decision_id: decisionId });

    const ok = await validate(tenant, { amount: 50 }, { approval_id: body.approval_id });
    expect(ok.json()).toMatchObject({ decision: 'allow' });
    expect(ok.json().reason).toMatch(/approved by alice/);
    expect(ok.json().failed_constraints).toBeUndefined();
    expect(ok.json().approval_id).toBeUndefined();
    const used = JSON.parse((await receiptsOf(t, tenant.orgId)).at(-1)!);
    expect(used).toMatchObject({ decision: 'allow', approval_id: body.approval_id });

    const twice = await validate(tenant, { amount: 50 }, { approval_id: body.approval_id });
    expect(twice.json().decision).toBe('deny');
    expect(twice.json().reason).toMatch(/already used/);
    seen.stop();
    expect((await verifyReceipts(await receiptsOf(t, tenant.orgId))).ok).toBe(true);
  });

  it('denies, without using the approval, a call it was not granted for', async () => {
    const tenant = await teamTenantWithPolicy();
    const id = await approved(tenant, { amount: 50 });
    const otherArgs = await validate(tenant, { amount: 51 }, { approval_id: id });
    expect(otherArgs.json().decision).toBe('deny');
    expect(otherArgs.json().reason).toMatch(/different arguments/);
    // Another tool that also needs approval (one allowed anyway ignores approval_id, see below).
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'send', constraints: [ESCALATE] },
    });
    const otherTool = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'send', arguments: { amount: 50 }, context: { approval_id: id } },
    });
    expect(otherTool.json().decision).toBe('deny');
    expect(otherTool.json().reason).toMatch(/granted for tool "wire"/);
    expect(await usedAt(id)).toBeNull();
    expect((await validate(tenant, { amount: 50 }, { approval_id: id })).json().decision).toBe('allow');
  });

  it('denies with denied, expired, unknown and foreign approvals, saying why', async () => {
    const tenant = await teamTenantWithPolicy();
    const esc = await validate(tenant, { amount: 20 });
    const deniedId = esc.json().approval_id;
    await resolveApproval(t, tenant, deniedId, 'deny', 'bob');
    const denied = await validate(tenant, { amount: 20 }, { approval_id: deniedId });
    expect(denied.json()).toMatchObject({ decision: 'deny' });
    expect(denied.json().reason).toMatch(/denied by bob/);

    const stale = (await validate(tenant, { amount: 30 })).json().approval_id;
    clock.advance(3601);
    const expired = await validate(tenant, { amount: 30 }, { approval_id: stale });
    expect(expired.json().reason).toMatch(/expired/);

    const unknown = await validate(
      tenant,
      { amount: 30 },
      { approval_id: '00000000-0000-7000-8000-000000000000' },
    );
    expect(unknown.json().reason).toMatch(/not found/);

    const other = await teamTenantWithPolicy();
    const theirs = await approved(other, { amount: 30 });
    const foreign = await validate(tenant, { amount: 30 }, { approval_id: theirs });
    expect(foreign.json()).toMatchObject({ decision: 'deny' });
    expect(foreign.json().reason).toMatch(/not found/);
    expect(await usedAt(theirs)).toBeNull();
  });

  it('ignores approval_id on a call allowed anyway: the approval stays unused, unknown ids too', async () => {
    const tenant = await teamTenantWithPolicy();
    const id = await approved(tenant, { amount: 50 });
    const small = await validate(tenant, { amount: 5 }, { approval_id: id });
    expect(small.json()).toMatchObject({
      decision: 'allow',
      reason: 'Allowed: every constraint is satisfied',
    });
    const unknown = await validate(tenant, { amount: 5 }, { approval_id: 'nope' });
    expect(unknown.json().decision).toBe('allow');
    const noPolicy = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'free', arguments: { amount: 50 }, context: { approval_id: id } },
    });
    expect(noPolicy.json().decision).toBe('allow');
    expect(await usedAt(id)).toBeNull();
    expect((await validate(tenant, { amount: 50 }, { approval_id: id })).json().reason).toMatch(
      /approved by/,
    );
  });

  it('lets a hard deny of the policy stand and keeps the approval unused', async () => {
    const tenant = await teamTenantWithPolicy([
      ESCALATE,
      { argumentName: 'currency', enabled: true, enum: ['USD'] },
    ]);
    const res = await openApproval(t, tenant, {
      toolName: 'wire',
      arguments: { amount: 50, currency: 'GBP' },
    });
    const id = res.json().id;
    await resolveApproval(t, tenant, id, 'approve');
    const call = await validate(tenant, { amount: 50, currency: 'GBP' }, { approval_id: id });
    expect(call.json().decision).toBe('deny');
    expect(call.json().reason).toMatch(/currency.*not applied because the policy denies/);
    expect(await usedAt(id)).toBeNull();
  });

  it('applies session limits to approved calls; a refused call keeps its approval', async () => {
    const tenant = await teamTenantWithPolicy([ESCALATE], { maxCalls: 1 });
    expect((await validate(tenant, { amount: 1 }, { session_id: 'S' })).json().decision).toBe('allow');
    const id = await approved(tenant, { amount: 50 });
    const capped = await validate(tenant, { amount: 50 }, { approval_id: id, session_id: 'S' });
    expect(capped.json().decision).toBe('deny');
    expect(capped.json().failed_constraints).toEqual([
      expect.objectContaining({ constraint_type: 'max_calls' }),
    ]);
    expect(await usedAt(id)).toBeNull();
    const noSession = await validate(tenant, { amount: 50 }, { approval_id: id });
    expect(noSession.json().failed_constraints[0].parameter).toBe('context.session_id');
    expect(await usedAt(id)).toBeNull();
    const fresh = await validate(tenant, { amount: 50 }, { approval_id: id, session_id: 'T' });
    expect(fresh.json().decision).toBe('allow');
    expect(await usedAt(id)).not.toBeNull();
  });

  it('denies, rather than puts to a person, a call its session refuses now; nothing is counted until approved', async () => {
    const tenant = await teamTenantWithPolicy([ESCALATE], { maxCalls: 1 });
    const call = (amount: number) => validate(tenant, { amount }, { session_id: 'W' });
    // The session has room: asked for, twice, and neither counts.
    expect((await call(50)).json().decision).toBe('require_approval');
    expect((await call(50)).json().decision).toBe('require_approval');
    expect((await call(5)).json().decision).toBe('allow');
    const over = (await call(50)).json();
    expect(over.decision).toBe('deny');
    expect(over.approval_id).toBeUndefined();
    expect(over.failed_constraints.map((f: { constraint_type: string }) => f.constraint_type)).toEqual([
      'range',
      'max_calls',
    ]);
    const pending = await t.inject({
      method: 'GET',
      url: '/v1/approvals/pending',
      headers: { ...bearer(await t.token(tenant.userId)), 'x-organization-id': tenant.orgId },
    });
    expect(pending.json().data).toHaveLength(2);
  });

  it('lets only one of many concurrent calls use an approval', async () => {
    const tenant = await teamTenantWithPolicy();
    const id = await approved(tenant, { amount: 50 });
    const results = await Promise.all(
      Array.from({ length: 10 }, () => validate(tenant, { amount: 50 }, { approval_id: id })),
    );
    const decisions = results.map((r) => r.json().decision);
    expect(decisions.filter((d) => d === 'allow')).toHaveLength(1);
    expect(decisions.filter((d) => d === 'deny')).toHaveLength(9);
  });
});
