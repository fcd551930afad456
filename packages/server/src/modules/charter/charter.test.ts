import { describe, expect, it } from 'vitest';
import { asUserScope } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { createPolicyRepository, type PolicyRepository } from '../policies/repository.js';
import { createToolRepository } from '../tools/repository.js';
import { createCharterRepository } from './repository.js';
import { createCharterService } from './service.js';

const t = useTestApp();

const PAYMENT_TOOL = {
  name: 'send_payment',
  description: 'Pays a recipient',
  parameters: [
    { name: 'amount', type: 'number', required: true },
    { name: 'currency', type: 'string' },
    { name: 'recipient', type: 'string' },
  ],
};

async function tenantWithTool(): Promise<Tenant> {
  const tenant = await createTenant(t);
  const res = await t.inject({
    method: 'POST',
    url: '/v1/tools/register',
    headers: keyHeader(tenant.apiKey),
    payload: { tools: [PAYMENT_TOOL] },
  });
  expect(res.statusCode).toBe(200);
  return tenant;
}

const turn = (tenant: Tenant, payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/charter/turn', headers: keyHeader(tenant.apiKey), payload });

const validate = (tenant: Tenant, args: Record<string, unknown>) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: 'send_payment', arguments: args },
  });

const policyOf = async (tenant: Tenant) =>
  (
    await t.inject({ method: 'GET', url: '/v1/policies/send_payment', headers: keyHeader(tenant.apiKey) })
  ).json();

/** The app's Charter service, with a repository of the test's own in place of the store's. */
function serviceWith(parts: {
  repo?: ReturnType<typeof createCharterRepository>;
  policies?: PolicyRepository;
}) {
  return createCharterService({
    db: t.store.db,
    repo: parts.repo ?? createCharterRepository(t.store.db),
    tools: createToolRepository(t.store.db),
    policies: parts.policies ?? createPolicyRepository(t.store.db),
    registry: {
      upsert: () => {
        throw new Error('not used');
      },
    },
    cache: t.ctx.policies,
    events: t.ctx.events,
    clock: t.ctx.clock,
    baseUrl: t.config.baseUrl,
    judgeRoute: (p) => t.ctx.judge.route(p),
    ask: null,
  });
}

describe('POST /v1/charter/turn (compile)', () => {
  it('proposes a verified change that is not live until a person approves it', async () => {
    const tenant = await tenantWithTool();
    const before = await policyOf(tenant);
    const res = await turn(tenant, {
      message: 'Block send_payment over $1,000 and ask a person for amounts above $500',
      mode: 'compile',
      surface: 'api',
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      mode: 'compile',
      notUnderstood: [],
      verification: { required: true, status: 'pending' },
      changes: [
        {
          toolName: 'send_payment',
          current: { version: before.version },
          quality: { valid: true },
          proposed: {
            mode: 'deterministic',
            constraints: expect.arrayContaining([
              expect.objectContaining({ argumentName: 'amount', maximum: 1000 }),
              expect.objectContaining({ argumentName: 'amount', maximum: 500, action: 'require_approval' }),
            ]),
          },
        },
      ],
    });
    const examples = body.changes[0].analysis.examples as {
      arguments: { amount: number };
      decision: string;
    }[];
    expect(examples.some((e) => e.decision === 'allow')).toBe(true);
    expect(examples.some((e) => e.decision === 'deny' && e.arguments.amount === 1001)).toBe(true);
    expect(body.verification.linkUrl).toMatch(
      new RegExp(`^${t.config.baseUrl}/charter/verify/${body.verification.id}\\?token=`),
    );

    // Nothing is live: the old policy still answers.
    expect((await validate(tenant, { amount: 5000 })).json().decision).toBe('allow');
    expect((await policyOf(tenant)).version).toBe(before.version);

    // The review link answers a readable page; a wrong secret is a missing page.
    const page = await t.inject({
      method: 'GET',
      url: body.verification.linkUrl.slice(t.config.baseUrl.length),
    });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    expect(page.body).toContain('send_payment');
    expect(page.body).toContain('is at most 1000');
    expect(page.body).toContain('is at most 500 (otherwise a person approves the call)');
    const wrong = await t.inject({
      method: 'GET',
      url: `/charter/verify/${body.verification.id}?token=nope`,
    });
    expectError(wrong, 404, 'not_found');

    // The API key that proposed cannot approve; a member's user token can.
    const byKey = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: keyHeader(tenant.apiKey),
    });
    expectError(byKey, 403, 'authorization_error');
    const read = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${body.verification.id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(read.json()).toMatchObject({ status: 'pending', kind: 'policy_change' });

    const approved = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expect(approved.statusCode).toBe(200);
    expect(approved.json()).toMatchObject({
      status: 'approved',
      resolvedBy: tenant.userId,
      applied: [{ toolName: 'send_payment', version: before.version + 1 }],
    });
    expect((await policyOf(tenant)).version).toBe(before.version + 1);
    expect((await validate(tenant, { amount: 5000 })).json().decision).toBe('deny');
    const again = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expectError(again, 400, 'invalid_status');
  });

  it('rejection changes nothing', async () => {
    const tenant = await tenantWithTool();
    const before = await policyOf(tenant);
    const body = (
      await turn(tenant, { message: 'send_payment currency must be USD or EUR', mode: 'compile' })
    ).json();
    const rejected = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/reject`,
      headers: asUser(tenant),
    });
    expect(rejected.json()).toMatchObject({ status: 'rejected' });
    expect(await policyOf(tenant)).toEqual(before);
    const approve = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expectError(approve, 400, 'invalid_status');
  });

  it('refuses to apply a proposal whose policy changed since', async () => {
    const tenant = await tenantWithTool();
    const body = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/policies/send_payment',
      headers: keyHeader(tenant.apiKey),
      payload: { constraints: [{ argumentName: 'amount', maximum: 5 }] },
    });
    expect(put.statusCode).toBe(200);
    const approve = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expectError(approve, 409, 'conflict');
    expect((await policyOf(tenant)).constraints).toEqual([
      { argumentName: 'amount', enabled: true, maximum: 5 },
    ]);
  });

  it('refuses to apply a proposal whose policy was deleted and written again at the same version', async () => {
    const tenant = await tenantWithTool();
    const before = await policyOf(tenant);
    const body = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    const h = keyHeader(tenant.apiKey);
    const del = await t.inject({ method: 'DELETE', url: '/v1/policies/send_payment', headers: h });
    expect(del.statusCode).toBe(200);
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: h,
      payload: { toolName: 'send_payment', constraints: [{ argumentName: 'amount', maximum: 5 }] },
    });
    expect(created.statusCode).toBe(201);
    const rewritten = await policyOf(tenant);
    expect(rewritten.version).toBe(before.version);
    const approve = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${body.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expectError(approve, 409, 'conflict');
    expect(approve.json().error.message).toContain('rewritten');
    expect(await policyOf(tenant)).toEqual(rewritten);
  });

  it('refuses to apply a proposal whose policy was deactivated or activated since', async () => {
    const tenant = await tenantWithTool();
    const h = keyHeader(tenant.apiKey);
    const setActive = async (action: 'activate' | 'deactivate') =>
      expect(
        (await t.inject({ method: 'POST', url: `/v1/policies/send_payment/${action}`, headers: h }))
          .statusCode,
      ).toBe(200);
    const approve = (id: string) =>
      t.inject({ method: 'POST', url: `/v1/charter/verifications/${id}/approve`, headers: asUser(tenant) });

    // Proposed over an active policy, deactivated before the review: the reviewer's tightening
    // would be saved on a policy that checks nothing.
    const whileActive = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    expect(whileActive.changes[0].current).toMatchObject({ isActive: true });
    await setActive('deactivate');
    const before = await policyOf(tenant);
    const off = await approve(whileActive.verification.id);
    expectError(off, 409, 'conflict');
    expect(off.json().error.message).toContain('deactivated');
    expect(await policyOf(tenant)).toEqual(before);

    // Proposed over an inactive policy (the reply says so), activated before the review: the change
    // would go live although the reviewer saw a policy that checked nothing.
    const whileInactive = await turn(tenant, {
      message: 'Limit send_payment amount to 200',
      mode: 'compile',
    });
    expect(whileInactive.json().changes[0].current).toMatchObject({ isActive: false });
    expect(whileInactive.json().reply).toContain('inactive');
    const page = await t.inject({
      method: 'GET',
      url: whileInactive.json().verification.linkUrl.slice(t.config.baseUrl.length),
    });
    expect(page.body).toContain('inactive');
    await setActive('activate');
    const on = await approve(whileInactive.json().verification.id);
    expectError(on, 409, 'conflict');
    expect(on.json().error.message).toContain('activated');
    expect((await policyOf(tenant)).version).toBe(before.version);
    expect((await validate(tenant, { amount: 5000 })).json().decision).toBe('allow');

    // Approved in the state it was proposed in, the change applies and keeps that state.
    await setActive('deactivate');
    const again = (
      await turn(tenant, { message: 'Limit send_payment amount to 300', mode: 'compile' })
    ).json();
    const applied = await approve(again.verification.id);
    expect(applied.statusCode).toBe(200);
    expect(await policyOf(tenant)).toMatchObject({ version: before.version + 1, isActive: false });
  });

  it('reads a proposal that recorded no activity (made before it was recorded) as made over an active policy', async () => {
    const tenant = await tenantWithTool();
    const propose = async (max: number) => {
      const body = (
        await turn(tenant, { message: `Limit send_payment amount to ${max}`, mode: 'compile' })
      ).json();
      const row = await t.store.db
        .selectFrom('charter_verifications')
        .select('changes')
        .where('id', '=', body.verification.id)
        .executeTakeFirstOrThrow();
      const changes = JSON.parse(row.changes) as { current: Record<string, unknown> }[];
      for (const c of changes) delete c.current.isActive;
      await t.store.db
        .updateTable('charter_verifications')
        .set({ changes: JSON.stringify(changes) })
        .where('id', '=', body.verification.id)
        .execute();
      return body.verification.id as string;
    };
    const approve = (id: string) =>
      t.inject({ method: 'POST', url: `/v1/charter/verifications/${id}/approve`, headers: asUser(tenant) });
    const first = await propose(100);
    const second = await propose(100);
    await t.inject({
      method: 'POST',
      url: '/v1/policies/send_payment/deactivate',
      headers: keyHeader(tenant.apiKey),
    });
    const refused = await approve(first);
    expectError(refused, 409, 'conflict');
    expect(refused.json().error.message).toContain('deactivated since this proposal');
    await t.inject({
      method: 'POST',
      url: '/v1/policies/send_payment/activate',
      headers: keyHeader(tenant.apiKey),
    });
    expect((await approve(second)).statusCode).toBe(200);
    expect(await policyOf(tenant)).toMatchObject({ version: 2, isActive: true });
  });

  it('refuses a proposal whose policy is deactivated between the approval reading and writing it', async () => {
    const tenant = await tenantWithTool();
    const body = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    const real = createPolicyRepository(t.store.db);
    // A deactivation that lands after the approval checked the policy, before its write: activity
    // has no version, so only the written row can show it.
    const policies: PolicyRepository = {
      ...real,
      async replace(organizationId, toolName, patch, trx, expectedVersion) {
        await (trx ?? t.store.db)
          .updateTable('policies')
          .set({ is_active: 0 })
          .where('organization_id', '=', organizationId)
          .where('tool_name', '=', toolName)
          .execute();
        return real.replace(organizationId, toolName, patch, trx, expectedVersion);
      },
    };
    const service = serviceWith({ policies });
    const scope = asUserScope(tenant);
    await expect(service.approve(scope, body.verification.id)).rejects.toMatchObject({ code: 'conflict' });
    expect(await policyOf(tenant)).toMatchObject({ version: 1, isActive: true });
    const read = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${body.verification.id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(read.json().status).toBe('pending');
  });

  it('answers invalid_status to the second of two approvals at once, never a conflict', async () => {
    const tenant = await tenantWithTool();
    const body = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    const before = await policyOf(tenant);
    const real = createCharterRepository(t.store.db);
    // Both approvals read the verification pending before either goes on: the moment two people (or
    // one double click) approve at once. Then one applies the change; the other must find the
    // verification resolved, not the policy it was proposed over changed (that was 409 on PostgreSQL).
    let arrived = 0;
    let release!: () => void;
    const bothRead = new Promise<void>((resolve) => {
      release = resolve;
    });
    const repo: typeof real = {
      ...real,
      async getVerification(organizationId, id, trx) {
        const row = await real.getVerification(organizationId, id, trx);
        if (++arrived === 2) release();
        if (arrived <= 2) await bothRead;
        return row;
      },
    };
    const service = serviceWith({ repo });
    const scope = asUserScope(tenant);
    const outcomes = await Promise.allSettled([
      service.approve(scope, body.verification.id),
      service.approve(scope, body.verification.id),
    ]);
    const won = outcomes.filter((o) => o.status === 'fulfilled');
    const lost = outcomes.filter((o) => o.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.reason).toMatchObject({ code: 'invalid_status' });
    expect(won[0]!.value).toMatchObject({
      status: 'approved',
      applied: [{ toolName: 'send_payment', version: before.version + 1 }],
    });
    // Applied once, and recorded as the winner applied it.
    expect((await policyOf(tenant)).version).toBe(before.version + 1);
    const read = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${body.verification.id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(read.json()).toMatchObject({
      status: 'approved',
      applied: [{ toolName: 'send_payment', version: before.version + 1 }],
    });
  });

  it('says what it could not understand and offers nothing for it', async () => {
    const tenant = await tenantWithTool();
    const res = await turn(tenant, {
      message: 'Make send_payment safe. Limit the fee of send_payment to $5',
      mode: 'compile',
    });
    expect(res.json()).toMatchObject({ verification: { required: false }, changes: [] });
    expect(res.json().notUnderstood).toHaveLength(2);
    expect(res.json().notUnderstood[1].why).toContain('"fee" is not an argument');
  });

  it('refuses, with its problems, a proposal a PUT would refuse: never a 500, and the turn is saved', async () => {
    const tenant = await tenantWithTool();
    const before = await policyOf(tenant);
    const cases: [string, string][] = [
      ['send_payment recipient must match /(/', 'regex cannot be used'],
      ['send_payment recipient must match `a{2,1}`', 'regex cannot be used'],
      [`send_payment recipient must contain "${'x'.repeat(300)}"`, 'regex cannot be used'],
      ['send_payment recipient must be at most -3 characters', 'maxLength must be a whole number'],
    ];
    for (const [message, problem] of cases) {
      const res = await turn(tenant, { message, mode: 'compile' });
      expect(res.statusCode, message).toBe(200);
      const body = res.json();
      expect(body).toMatchObject({ changes: [], verification: { required: false } });
      expect(body.reply).toContain('Not offered for send_payment: the result would be an invalid policy (');
      expect(body.reply).toContain(problem);
      const next = await turn(tenant, {
        message: 'What is the policy of send_payment?',
        conversationId: body.conversationId,
      });
      expect(next.statusCode, message).toBe(200);
    }
    expect(await policyOf(tenant)).toEqual(before);
  });

  it('refuses a proposal holding more than 64 patterns, as a PUT would, and opens nothing', async () => {
    const tenant = await tenantWithTool();
    const h = keyHeader(tenant.apiKey);
    const regexes = Array.from({ length: 64 }, (_, i) => ({ argumentName: `a${i}`, regex: `^v${i}$` }));
    const put = await t.inject({
      method: 'PUT',
      url: '/v1/policies/send_payment',
      headers: h,
      payload: { constraints: regexes },
    });
    expect(put.statusCode).toBe(200);
    const before = await policyOf(tenant);
    const res = await turn(tenant, {
      message: 'send_payment recipient must match /^acct-/',
      mode: 'compile',
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ changes: [], verification: { required: false } });
    expect(body.reply).toContain('Not offered for send_payment: the result would be an invalid policy (');
    expect(body.reply).toContain('at most 64 patterns');
    expect(body.reply).toContain('this one holds 65');
    const pending = await t.inject({ method: 'GET', url: '/v1/charter/verifications', headers: h });
    expect(pending.json().data).toEqual([]);
    expect(await policyOf(tenant)).toEqual(before);
    // A change that adds no pattern stays within the limit and is offered.
    const cap = await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' });
    expect(cap.json()).toMatchObject({
      verification: { required: true },
      changes: [{ quality: { valid: true } }],
    });
  });

  it('re-checks the pattern limit on approval: a proposal made before it is refused, nothing applied', async () => {
    const tenant = await tenantWithTool();
    const before = await policyOf(tenant);
    const body = (
      await turn(tenant, { message: 'Limit send_payment amount to 100', mode: 'compile' })
    ).json();
    const id = body.verification.id as string;
    // As stored by a proposal made before the limit: the change holds 65 patterns.
    const row = await t.store.db
      .selectFrom('charter_verifications')
      .select('changes')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    const changes = JSON.parse(row.changes);
    changes[0].proposed.constraints.push(
      ...Array.from({ length: 65 }, (_, i) => ({ argumentName: 'recipient', notRegex: `^x${i}$` })),
    );
    await t.store.db
      .updateTable('charter_verifications')
      .set({ changes: JSON.stringify(changes) })
      .where('id', '=', id)
      .execute();
    const approve = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${id}/approve`,
      headers: asUser(tenant),
    });
    expectError(approve, 400, 'validation_failed');
    expect(approve.json().error.message).toContain('The change for "send_payment" cannot be saved');
    expect(approve.json().error.message).toContain('at most 64 patterns');
    const read = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(read.json()).toMatchObject({ status: 'pending', resolvedBy: null, applied: null });
    expect(await policyOf(tenant)).toEqual(before);
  });

  it('builds no example value longer than it can show (a bound of ten billion characters)', async () => {
    const tenant = await tenantWithTool();
    const res = await turn(tenant, {
      message: 'send_payment recipient must be at most 10000000000 characters',
      mode: 'compile',
    });
    expect(res.statusCode).toBe(200);
    const [change] = res.json().changes;
    expect(change.proposed.constraints).toContainEqual({
      argumentName: 'recipient',
      enabled: true,
      maxLength: 10_000_000_000,
    });
    expect(change.analysis.examples.length).toBeGreaterThan(0);
    expect(res.body.length).toBeLessThan(100_000);
  });

  it('reads the names of a policy whose tool was never registered', async () => {
    const tenant = await createTenant(t);
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'transfer_funds', constraints: [{ argumentName: 'amount', maximum: 500 }] },
    });
    const res = await turn(tenant, {
      message: 'Ask a person for transfer_funds above $100',
      mode: 'compile',
    });
    expect(res.json()).toMatchObject({
      notUnderstood: [],
      changes: [{ toolName: 'transfer_funds', current: { version: 1 } }],
      verification: { required: true },
    });
  });

  it('continues a conversation: a follow-up names no tool', async () => {
    const tenant = await tenantWithTool();
    const first = (await turn(tenant, { message: 'What is the policy of send_payment?' })).json();
    expect(first.mode).toBe('chat');
    const second = await turn(tenant, {
      message: 'Block amounts over 300',
      conversationId: first.conversationId,
    });
    expect(second.json()).toMatchObject({
      conversationId: first.conversationId,
      mode: 'compile',
      changes: [{ toolName: 'send_payment' }],
    });
  });
});

describe('POST /v1/charter/turn (chat)', () => {
  it('dry-runs the engine on the call a question describes', async () => {
    const tenant = await tenantWithTool();
    await t.inject({
      method: 'PUT',
      url: '/v1/policies/send_payment',
      headers: keyHeader(tenant.apiKey),
      payload: { constraints: [{ argumentName: 'amount', maximum: 100 }] },
    });
    const res = await turn(tenant, {
      message: 'Would send_payment with amount 250 be allowed?',
      mode: 'auto',
    });
    expect(res.json()).toMatchObject({
      mode: 'chat',
      verification: { required: false },
      dryRuns: [{ toolName: 'send_payment', arguments: { amount: 250 }, decision: 'deny' }],
    });
    expect(res.json().reply).toContain('denied');
    const money = await turn(tenant, { message: 'can I send_payment $50?', mode: 'chat' });
    expect(money.json().dryRuns[0]).toMatchObject({ arguments: { amount: 50 }, decision: 'allow' });
    const list = await turn(tenant, { message: 'Which tools do I have?' });
    expect(list.json().reply).toContain('send_payment');
  });
});

describe('charter errors and tenancy', () => {
  it('answers the documented errors', async () => {
    const tenant = await tenantWithTool();
    expectError(await turn(tenant, {}), 400, 'validation_failed');
    expectError(await turn(tenant, { message: 'x', mode: 'shout' }), 400, 'validation_failed');
    expectError(
      await turn(tenant, { message: 'x', conversationId: '01900000-0000-7000-8000-000000000000' }),
      404,
      'not_found',
    );
    const anon = await t.inject({ method: 'POST', url: '/v1/charter/turn', payload: { message: 'hi' } });
    expectError(anon, 401, 'unauthorized');
    const bad = await t.inject({
      method: 'GET',
      url: '/v1/charter/verifications/not-a-uuid',
      headers: keyHeader(tenant.apiKey),
    });
    expectError(bad, 400, 'validation_failed');
  });

  it("never shows or resolves another organization's verification or conversation", async () => {
    const a = await tenantWithTool();
    const b = await tenantWithTool();
    const body = (await turn(a, { message: 'Limit send_payment amount to 100', mode: 'compile' })).json();
    const id = body.verification.id;
    expectError(
      await t.inject({ method: 'GET', url: `/v1/charter/verifications/${id}`, headers: keyHeader(b.apiKey) }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({ method: 'POST', url: `/v1/charter/verifications/${id}/approve`, headers: asUser(b) }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({ method: 'POST', url: `/v1/charter/verifications/${id}/reject`, headers: asUser(b) }),
      404,
      'not_found',
    );
    expectError(await turn(b, { message: 'hello', conversationId: body.conversationId }), 404, 'not_found');
    const list = await t.inject({
      method: 'GET',
      url: '/v1/charter/verifications',
      headers: keyHeader(b.apiKey),
    });
    expect(list.json().data).toEqual([]);
    expect((await policyOf(a)).version).toBe(1);
  });
});

describe('POST /v1/charter/stream', () => {
  it('streams progress events, then the result', async () => {
    const tenant = await tenantWithTool();
    const res = await t.inject({
      method: 'POST',
      url: '/v1/charter/stream',
      headers: keyHeader(tenant.apiKey),
      payload: { message: 'Block send_payment over 900', mode: 'compile', surface: 'api' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/event-stream');
    const events = res.body
      .trim()
      .split('\n\n')
      .map((chunk) => {
        const [event, data] = chunk.split('\n');
        return { event: event!.slice('event: '.length), data: JSON.parse(data!.slice('data: '.length)) };
      });
    expect(events.map((e) => e.event)).toEqual(['progress', 'progress', 'progress', 'progress', 'result']);
    expect(events.map((e) => e.data.stage).slice(0, 4)).toEqual([
      'received',
      'compiling',
      'analysing',
      'verification',
    ]);
    expect(events.at(-1)!.data).toMatchObject({
      verification: { required: true },
      changes: [{ toolName: 'send_payment' }],
    });
    const missing = await t.inject({
      method: 'POST',
      url: '/v1/charter/stream',
      headers: keyHeader(tenant.apiKey),
      payload: { message: 'x', conversationId: '01900000-0000-7000-8000-000000000000' },
    });
    expectError(missing, 404, 'not_found');
  });
});
