import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';

const t = useTestApp();

const rule = (
  id: string,
  action: string,
  tools: string[],
  field: string,
  operator: string,
  value: unknown,
) => ({
  id,
  action,
  tools,
  conditions: [{ field, operator, value }],
  severity: 'high',
});

async function draft(tenant: Tenant, rules: object[]): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/policy-drafts',
    headers: keyHeader(tenant.apiKey),
    payload: { name: 'Caps', projectId: tenant.projectId, createdByAgentId: 'agent', rules },
  });
  expect(res.statusCode).toBe(201);
  return res.json().data.id;
}

const validate = (tenant: Tenant, tool: string, args: Record<string, unknown>, ctx = {}) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: tool, arguments: args, context: { session_id: 's-1', ...ctx } },
  });

/** A decision the SDK took and logged (allow, under no policy). */
const logCall = (tenant: Tenant, args: Record<string, unknown>) =>
  t.inject({
    method: 'POST',
    url: '/v1/decisions',
    headers: keyHeader(tenant.apiKey),
    payload: {
      tool_name: 'pay',
      arguments: args,
      decision: 'allow',
      mode: 'deterministic',
      latency_ms: 0.1,
      source: 'client',
    },
  });

const replay = (tenant: Tenant, id: string, payload: Record<string, unknown> = {}) =>
  t.inject({ method: 'POST', url: `/v1/policy-drafts/${id}/replay`, headers: asUser(tenant), payload });

describe('POST /v1/policy-drafts/:id/replay', () => {
  it('names the recorded decisions the draft would have changed, with before and after, and writes nothing', async () => {
    const tenant = await createTenant(t);
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', constraints: [{ argumentName: 'amount', maximum: 1000 }] },
    });
    for (const [amount, currency] of [
      [5, 'USD'],
      [50, 'EUR'],
      [500, 'USD'],
      [5000, 'USD'],
    ] as const) {
      const res = await validate(tenant, 'pay', { amount, currency }, { agent_id: 'bot' });
      expect(res.statusCode).toBe(200);
    }
    await validate(tenant, 'other', { amount: 500 });
    const id = await draft(tenant, [
      rule('cap', 'allow', ['pay'], 'arguments.amount', 'less_than_or_equal', 100),
      rule('no-eur', 'block', ['pay'], 'currency', 'equals', 'EUR'),
    ]);

    const res = await replay(tenant, id, { limit: 50 });
    expect(res.statusCode).toBe(200);
    const body = res.json().data;
    expect(body).toMatchObject({ draftId: id, tools: ['pay'], examined: 4, skipped: [] });
    // It names the revision it replayed, as the draft reads.
    const read = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: asUser(tenant) });
    expect(body.revision).toBe(read.json().data.revision);
    // Newest first. 5 stays allowed; 5000 was already denied by the live policy.
    const changed = body.changed as {
      arguments: { amount: number };
      agentId: string;
      before: { decision: string };
      after: { decision: string; failedConstraints: unknown[] };
    }[];
    expect(changed.map((c) => [c.arguments.amount, c.before.decision, c.after.decision])).toEqual([
      [500, 'allow', 'deny'],
      [50, 'allow', 'deny'],
    ]);
    expect(changed[0]!.agentId).toBe('bot');
    expect(changed[0]!.after.failedConstraints.length).toBeGreaterThan(0);

    // The limit counts the most recent decisions only.
    const one = (await replay(tenant, id, { limit: 1 })).json().data;
    expect(one.examined).toBe(1);
    expect(one.changed).toEqual([]);

    // Nothing changed: the draft is still a draft and the live policy still allows 500.
    const after = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: asUser(tenant) });
    expect(after.json().data.status).toBe('draft');
    expect((await validate(tenant, 'pay', { amount: 500 })).json().decision).toBe('allow');
  });

  it("replays an inactive policy's own constraints too, since approving activates it", async () => {
    const tenant = await createTenant(t);
    const create = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', constraints: [{ argumentName: 'amount', maximum: 10 }] },
    });
    expect(create.statusCode).toBe(201);
    const off = await t.inject({
      method: 'POST',
      url: '/v1/policies/pay/deactivate',
      headers: keyHeader(tenant.apiKey),
    });
    expect(off.statusCode).toBe(200);
    // Inactive: every call passes unchecked.
    for (const amount of [5, 50, 500]) {
      expect((await validate(tenant, 'pay', { amount })).json().decision).toBe('allow');
    }
    const id = await draft(tenant, [rule('cap', 'allow', ['pay'], 'amount', 'less_than_or_equal', 100)]);

    const replayed = (await replay(tenant, id)).json().data;
    const changed = replayed.changed as { arguments: { amount: number }; after: { decision: string } }[];
    expect(changed.map((c) => [c.arguments.amount, c.after.decision])).toEqual([
      [500, 'deny'],
      [50, 'deny'],
    ]);

    // What approving then does: the policy is active again, with its cap of 10 and the draft's.
    const submit = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${id}/submit`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(submit.statusCode).toBe(200);
    const approve = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${id}/approve`,
      headers: asUser(tenant),
    });
    expect(approve.statusCode).toBe(200);
    for (const [amount, decision] of [
      [5, 'allow'],
      [50, 'deny'],
      [500, 'deny'],
    ] as const) {
      expect((await validate(tenant, 'pay', { amount })).json().decision).toBe(decision);
    }
  });

  it('reads every page of decisions, newest first, up to the limit', async () => {
    const tenant = await createTenant(t);
    // Logged one per request so that each has its own time: 25 calls, every odd amount above the cap.
    for (let amount = 0; amount < 25; amount++) {
      const res = await logCall(tenant, { amount: amount % 2 === 1 ? 500 + amount : amount });
      expect(res.statusCode).toBe(201);
    }
    const id = await draft(tenant, [
      rule('cap', 'allow', ['pay'], 'arguments.amount', 'less_than_or_equal', 100),
    ]);
    const all = (await replay(tenant, id, { limit: 1000 })).json().data;
    expect([all.examined, all.truncated, all.changed.length]).toEqual([25, false, 12]);
    expect(all.changed.map((c: { arguments: { amount: number } }) => c.arguments.amount)).toEqual(
      Array.from({ length: 12 }, (_, i) => 523 - 2 * i),
    );
    const some = (await replay(tenant, id, { limit: 13 })).json().data;
    expect([some.examined, some.truncated, some.changed.length]).toEqual([13, false, 6]);
    expect(some.changed).toEqual(all.changed.slice(0, 6));
  });

  it('stops once the arguments read reach 16 MiB, and says so', async () => {
    const tenant = await createTenant(t);
    // The oldest call is over the cap; seventeen calls of about 1 MiB each come after it.
    expect((await logCall(tenant, { amount: 5000, memo: '' })).statusCode).toBe(201);
    const memo = 'x'.repeat(1_000_000);
    for (let i = 0; i < 17; i++) expect((await logCall(tenant, { amount: i, memo })).statusCode).toBe(201);
    const id = await draft(tenant, [
      rule('cap', 'allow', ['pay'], 'arguments.amount', 'less_than_or_equal', 100),
    ]);
    const res = (await replay(tenant, id, { limit: 1000 })).json().data;
    // 16 MiB is 16.8 million characters: the seventeenth call crosses it and is still replayed.
    expect([res.examined, res.truncated, res.changed]).toEqual([17, true, []]);
    // Within the limit it reads everything: nothing is left out, so nothing is truncated.
    const few = (await replay(tenant, id, { limit: 3 })).json().data;
    expect([few.examined, few.truncated]).toEqual([3, false]);
  });

  it('reports the rules it cannot replay, as approving would', async () => {
    const tenant = await createTenant(t);
    const id = await draft(tenant, [rule('odd', 'require_approval', ['pay'], 'amount', 'greater_than', 5)]);
    const body = (await replay(tenant, id)).json().data;
    expect(body.examined).toBe(0);
    expect(body.skipped.map((s: { ruleId: string }) => s.ruleId)).toEqual(['odd']);
  });

  it('answers another organization 404 and refuses bad limits without a 500', async () => {
    const tenant = await createTenant(t);
    const other = await createTenant(t);
    const id = await draft(tenant, [rule('cap', 'allow', ['pay'], 'amount', 'less_than', 10)]);
    expectError(await replay(other, id), 404, 'not_found');
    const byKey = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${id}/replay`,
      headers: keyHeader(other.apiKey),
      payload: {},
    });
    expectError(byKey, 404, 'not_found');
    for (const limit of [0, 1001, 'x', 1.5])
      expectError(await replay(tenant, id, { limit }), 400, 'validation_failed');
    expectError(await replay(tenant, id, { limit: 5, extra: 1 }), 400, 'validation_failed');
    const noBody = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${id}/replay`,
      headers: asUser(tenant),
    });
    expectError(noBody, 400, 'validation_failed');
  });
});
