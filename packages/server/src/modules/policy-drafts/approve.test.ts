import { describe, expect, it } from 'vitest';
import { collectEvents, createKey, mintKey } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { createDraftRepository } from './repository.js';

const t = useTestApp();

const cond = (field: string, operator: string, value?: unknown) => ({ field, operator, value });
const rule = (id: string, action: string, tools: string[], conditions: object[], extra = {}) => ({
  id,
  action,
  tools,
  conditions,
  severity: 'high',
  ...extra,
});

const RULES = [
  rule('cap', 'allow', ['pay'], [cond('arguments.amount', 'less_than_or_equal', 100)]),
  rule('no-eur', 'block', ['pay'], [cond('currency', 'equals', 'EUR')]),
  rule('refund-cap', 'allow', ['refund'], [cond('arguments.amount', 'less_than', 50)]),
  rule('escalate', 'require_approval', ['pay'], [cond('amount', 'greater_than', 10)]),
  rule('off', 'allow', ['pay'], [cond('amount', 'greater_than', 1)], { enabled: false }),
  rule('empty', 'allow', ['pay'], []),
];

async function pendingDraft(tenant: Tenant, rules: object[] = RULES, key = tenant.apiKey): Promise<string> {
  const created = await t.inject({
    method: 'POST',
    url: '/v1/policy-drafts',
    headers: keyHeader(key),
    payload: { name: 'Caps', projectId: tenant.projectId, createdByAgentId: 'agent', rules },
  });
  const id = created.json().data.id;
  await t.inject({
    method: 'POST',
    url: `/v1/policy-drafts/${id}/submit`,
    headers: keyHeader(key),
  });
  return id;
}

const approve = (tenant: Tenant, id: string) =>
  t.inject({ method: 'POST', url: `/v1/policy-drafts/${id}/approve`, headers: asUser(tenant) });

let sessions = 0;
const validate = (tenant: Tenant, tool: string, args: Record<string, unknown>) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    // Session limits need a session id; a fresh one per call keeps them out of the way.
    payload: { tool_name: tool, arguments: args, context: { session_id: `s-${++sessions}` } },
  });

describe('POST /v1/policy-drafts/:id/approve', () => {
  it('needs a user: an API key alone gets 403', async () => {
    const tenant = await createTenant(t);
    const id = await pendingDraft(tenant);
    const res = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${id}/approve`,
      headers: keyHeader(tenant.apiKey),
    });
    expectError(res, 403, 'authorization_error');
    expect(res.json().error.message).toMatch(/policy-drafts:approve/);
  });

  it("nor does a key of the creator's lineage: one it minted, or one that minted it", async () => {
    const tenant = await createTenant(t);
    const both = await createKey(t, tenant, ['api', 'policy-drafts:approve'], 'agent and reviewer');
    const mint = (by: string, scopes: string[]) => mintKey(t, tenant, by, scopes);
    const reviewerChild = await mint(both, ['policy-drafts:approve']);
    const writerChild = await mint(both, ['api']);
    const approveAs = async (key: string, id: string) => {
      const shown = await t.inject({
        method: 'GET',
        url: `/v1/policy-drafts/${id}`,
        headers: keyHeader(key),
      });
      return t.inject({
        method: 'POST',
        url: `/v1/policy-drafts/${id}/approve`,
        headers: { ...keyHeader(key), 'if-match': shown.headers.etag as string },
      });
    };
    const own = await pendingDraft(tenant, RULES, both);
    const byChild = await approveAs(reviewerChild, own);
    expectError(byChild, 403, 'authorization_error');
    expect(byChild.json().error.message).toMatch(
      /^an API key cannot approve a policy draft a key of its lineage created/,
    );
    const childs = await pendingDraft(tenant, RULES, writerChild);
    expectError(await approveAs(both, childs), 403, 'authorization_error');
    expectError(await approveAs(reviewerChild, childs), 403, 'authorization_error');
    // A reviewer key a person made approves both; the lineage's reviewer approves other lineages' drafts.
    const reviewer = await createKey(t, tenant, ['policy-drafts:approve'], 'reviewer');
    expect((await approveAs(reviewer, own)).statusCode).toBe(200);
    expect((await approveAs(reviewer, childs)).statusCode).toBe(200);
    expect((await approveAs(reviewerChild, await pendingDraft(tenant))).statusCode).toBe(200);
  });

  it('a key with policy-drafts:approve approves drafts of others, never its own', async () => {
    const tenant = await createTenant(t);
    const reviewer = await createKey(t, tenant, ['policy-drafts:approve'], 'reviewer');
    const both = await createKey(t, tenant, ['api', 'policy-drafts:approve'], 'agent and reviewer');
    const own = await pendingDraft(tenant, RULES, both);
    const self = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${own}/approve`,
      headers: keyHeader(both),
    });
    expectError(self, 403, 'authorization_error');
    expect(self.json().error.message).toBe('an API key cannot approve a policy draft it created');
    const listed = await t.inject({ method: 'GET', url: '/v1/policy-drafts', headers: keyHeader(reviewer) });
    const shown = listed.json().data.find((d: { id: string }) => d.id === own);
    // A key relays a person's click: it must name the revision it showed, or nothing is applied.
    for (const ifMatch of [undefined, '*', `W/"${shown.revision}"`]) {
      const blind = await t.inject({
        method: 'POST',
        url: `/v1/policy-drafts/${own}/approve`,
        headers: { ...keyHeader(reviewer), ...(ifMatch ? { 'if-match': ifMatch } : {}) },
      });
      expectError(blind, 400, 'validation_failed');
    }
    const res = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${own}/approve`,
      headers: { ...keyHeader(reviewer), 'if-match': `"${shown.revision}"` },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().data.status).toBe('approved');
    expect(res.json().data.reviewedBy).toMatch(/^apikey:/);
    // The reviewer key writes nothing else.
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/policy-drafts',
        headers: keyHeader(reviewer),
        payload: { name: 'x', projectId: tenant.projectId, createdByAgentId: 'a', rules: [] },
      }),
      403,
      'authorization_error',
    );
    // Another organization's reviewer key sees nothing.
    const other = await createTenant(t);
    const foreign = await createKey(t, other, ['policy-drafts:approve'], 'reviewer');
    const draft = await pendingDraft(tenant);
    expectError(
      await t.inject({
        method: 'POST',
        url: `/v1/policy-drafts/${draft}/approve`,
        headers: keyHeader(foreign),
      }),
      404,
      'not_found',
    );
  });

  it('with If-Match applies only the revision the reviewer read', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const id = await pendingDraft(tenant, [RULES[0]!]);
    const read = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: asUser(tenant) });
    const seen = read.json().data.revision as string;
    expect(seen).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(read.headers.etag).toBe(`"${seen}"`);
    // The agent withdraws, rewrites and resubmits while the person is reading.
    const patch = (payload: object) =>
      t.inject({ method: 'PATCH', url: `/v1/policy-drafts/${id}`, headers: h, payload });
    expect((await patch({ status: 'draft' })).json().data.revision).toBe(seen);
    const rewritten = (await patch({ rules: [RULES[2]!] })).json().data.revision;
    expect(rewritten).not.toBe(seen);
    await t.inject({ method: 'POST', url: `/v1/policy-drafts/${id}/submit`, headers: h });
    const approveAs = (ifMatch: string) =>
      t.inject({
        method: 'POST',
        url: `/v1/policy-drafts/${id}/approve`,
        headers: { ...asUser(tenant), 'if-match': ifMatch },
      });
    const stale = await approveAs(`"${seen}"`);
    expectError(stale, 409, 'conflict');
    expect(stale.json().error.message).toContain('edited since');
    // Nothing was applied and the draft still waits for review.
    expect((await t.inject({ method: 'GET', url: '/v1/policies', headers: h })).json().data).toEqual([]);
    const after = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: h });
    expect(after.json().data).toMatchObject({ status: 'pending_review', revision: rewritten });
    expectError(await approveAs('"a", "b"'), 400, 'validation_failed');
    // The revision read now, quoted as an ETag or bare, approves.
    const ok = await approveAs(rewritten);
    expect(ok.statusCode).toBe(200);
    expect(ok.json().applied.map((a: { toolName: string }) => a.toolName)).toEqual(['refund']);
  });

  it('a key writes only into drafts it created, so no key approves rules it wrote', async () => {
    const tenant = await createTenant(t);
    const both = await createKey(t, tenant, ['api', 'policy-drafts:approve'], 'agent and reviewer');
    const id = await pendingDraft(tenant, [RULES[0]!]);
    const patch = (payload: object, headers: Record<string, string> = keyHeader(both)) =>
      t.inject({ method: 'PATCH', url: `/v1/policy-drafts/${id}`, headers, payload });
    // Withdrawing another key's draft is allowed; rewriting it is not.
    expect((await patch({ status: 'draft' })).statusCode).toBe(200);
    const rewrite = await patch({ rules: [RULES[1]!] });
    expectError(rewrite, 403, 'authorization_error');
    expect(rewrite.json().error.message).toContain('only the policy drafts it created');
    const draft = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: asUser(tenant) });
    expect(draft.json().data.rules).toEqual([RULES[0]]);
    // A person may edit any draft.
    expect((await patch({ name: 'Edited by a person' }, asUser(tenant))).statusCode).toBe(200);
  });

  it('applies the approvable rules as working policies, merged per tool, and reports the rest', async () => {
    const tenant = await createTenant(t);
    const existing = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: {
        toolName: 'refund',
        mode: 'deterministic',
        constraints: [],
        sessionConstraints: { maxCalls: 5 },
      },
    });
    expect(existing.statusCode).toBe(201);
    // Warm the policy cache: approval must invalidate it.
    expect((await validate(tenant, 'refund', { amount: 60 })).json().decision).toBe('allow');
    const id = await pendingDraft(tenant);
    const seen = collectEvents(t, tenant.orgId);
    const res = await approve(tenant, id);
    seen.stop();
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.data).toMatchObject({ id, status: 'approved', reviewedBy: tenant.userId });
    expect(body.data.reviewedAt).toEqual(expect.any(String));
    expect(body.applied).toEqual([
      { toolName: 'pay', version: 1, created: true },
      { toolName: 'refund', version: 2, created: false },
    ]);
    expect(body.skipped).toEqual([
      { ruleId: 'escalate', reason: expect.stringMatching(/only allow and block/) },
      { ruleId: 'off', reason: expect.stringMatching(/disabled/) },
      { ruleId: 'empty', reason: expect.stringMatching(/no condition/) },
    ]);
    expect(seen.events.map((e) => [e.type, e.data])).toEqual([
      ['policy.created', { toolName: 'pay', projectId: tenant.projectId }],
      ['policy.updated', { toolName: 'refund', projectId: tenant.projectId, version: 2 }],
      ['draft.approved', { draftId: id }],
    ]);

    const pay = await t.inject({ method: 'GET', url: '/v1/policies/pay', headers: keyHeader(tenant.apiKey) });
    expect(pay.json()).toMatchObject({ version: 1, isActive: true, mode: 'deterministic' });
    const refund = await t.inject({
      method: 'GET',
      url: '/v1/policies/refund',
      headers: keyHeader(tenant.apiKey),
    });
    expect(refund.json()).toMatchObject({ version: 2, sessionConstraints: { maxCalls: 5 } });

    expect((await validate(tenant, 'pay', { amount: 50, currency: 'USD' })).json().decision).toBe('allow');
    const big = await validate(tenant, 'pay', { amount: 500, currency: 'USD' });
    expect(big.json()).toMatchObject({ decision: 'deny', failed_constraints: [{ parameter: 'amount' }] });
    const eur = await validate(tenant, 'pay', { amount: 5, currency: 'EUR' });
    expect(eur.json()).toMatchObject({ decision: 'deny', failed_constraints: [{ parameter: 'currency' }] });
    expect((await validate(tenant, 'pay', {})).json().decision).toBe('deny');
    expect((await validate(tenant, 'refund', { amount: 60 })).json().decision).toBe('deny');

    const again = await approve(tenant, id);
    expectError(again, 400, 'validation_failed');
    expect(again.json().error.message).toMatch(/approved/);
  });

  it('approves only from pending_review, and only once under concurrency', async () => {
    const tenant = await createTenant(t);
    const draft = await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'D', projectId: tenant.projectId, createdByAgentId: 'a', rules: RULES },
    });
    expectError(await approve(tenant, draft.json().data.id), 400, 'validation_failed');

    const id = await pendingDraft(tenant, [RULES[0]!]);
    const results = await Promise.all([approve(tenant, id), approve(tenant, id), approve(tenant, id)]);
    expect(results.filter((r) => r.statusCode === 200)).toHaveLength(1);
    for (const r of results.filter((x) => x.statusCode !== 200)) expectError(r, 400, 'validation_failed');
    const pay = await t.inject({ method: 'GET', url: '/v1/policies/pay', headers: keyHeader(tenant.apiKey) });
    expect(pay.json().version).toBe(1);
  });

  it('never weakens an existing policy: appends constraints, reactivates it, keeps llm mode', async () => {
    const tenant = await createTenant(t);
    const put = (toolName: string, body: object) =>
      t.inject({
        method: 'POST',
        url: '/v1/policies',
        headers: keyHeader(tenant.apiKey),
        payload: { toolName, ...body },
      });
    // pay: an existing cap of 10 must survive the draft's looser cap of 100; the policy is inactive.
    expect(
      (
        await put('pay', {
          mode: 'deterministic',
          constraints: [{ argumentName: 'amount', maximum: 10 }],
          sessionConstraints: { maxCalls: 7 },
        })
      ).statusCode,
    ).toBe(201);
    const off = await t.inject({
      method: 'POST',
      url: '/v1/policies/pay/deactivate',
      headers: keyHeader(tenant.apiKey),
    });
    expect(off.statusCode).toBeLessThan(300);
    expect(
      (await put('refund', { mode: 'llm', llmConfig: { description: 'refunds need a reason' } })).statusCode,
    ).toBe(201);
    const id = await pendingDraft(tenant, [RULES[0]!, RULES[2]!]);
    const seen = collectEvents(t, tenant.orgId);
    const res = await approve(tenant, id);
    seen.stop();
    expect(res.statusCode).toBe(200);
    expect(res.json().applied).toEqual([{ toolName: 'pay', version: 2, created: false }]);
    // Active again: the stream says so, as activating it would.
    expect(seen.events.map((e) => e.type)).toEqual(['policy.updated', 'policy.activated', 'draft.approved']);
    expect(res.json().skipped).toEqual([
      { ruleId: 'refund-cap', toolName: 'refund', reason: expect.stringMatching(/llm/) },
    ]);
    const pay = await t.inject({ method: 'GET', url: '/v1/policies/pay', headers: keyHeader(tenant.apiKey) });
    expect(pay.json()).toMatchObject({
      isActive: true,
      mode: 'deterministic',
      sessionConstraints: { maxCalls: 7 },
    });
    expect(pay.json().constraints).toHaveLength(2);
    expect((await validate(tenant, 'pay', { amount: 5 })).json().decision).toBe('allow');
    expect((await validate(tenant, 'pay', { amount: 50 })).json().decision).toBe('deny');
    const refund = await t.inject({
      method: 'GET',
      url: '/v1/policies/refund',
      headers: keyHeader(tenant.apiKey),
    });
    expect(refund.json()).toMatchObject({ version: 1, mode: 'llm', constraints: [] });
  });

  it("refuses rules that would take the tool's policy past 64 patterns: 400, nothing applied, still pending", async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const regexes = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ argumentName: `a${i}`, regex: `^v${i}$` }));
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: h,
      payload: { toolName: 'pay', constraints: regexes(60) },
    });
    expect(created.statusCode).toBe(201);
    const policyBefore = (await t.inject({ method: 'GET', url: '/v1/policies/pay', headers: h })).json();
    // Within the limit alone (so the draft is written), past it added to pay's 60; refund is fine.
    const rules = [
      rule('cap', 'allow', ['refund'], [cond('amount', 'less_than', 50)]),
      ...Array.from({ length: 5 }, (_, i) =>
        rule(`m${i}`, 'allow', ['pay'], [cond(`arguments.b${i}`, 'matches', `^w${i}$`)]),
      ),
    ];
    const id = await pendingDraft(tenant, rules);
    const seen = collectEvents(t, tenant.orgId);
    const res = await approve(tenant, id);
    seen.stop();
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('"pay"');
    expect(res.json().error.message).toContain('at most 64 patterns');
    expect(res.json().error.message).toContain('this one holds 65');
    expect(seen.events).toEqual([]);
    const draft = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${id}`, headers: h });
    expect(draft.json().data).toMatchObject({ status: 'pending_review', reviewedBy: null, reviewedAt: null });
    expect((await t.inject({ method: 'GET', url: '/v1/policies/pay', headers: h })).json()).toEqual(
      policyBefore,
    );
    const refund = await t.inject({ method: 'GET', url: '/v1/policies/refund', headers: h });
    expectError(refund, 404, 'not_found');

    // A draft written before the limit, holding 65 patterns on its own, is refused the same way.
    const old = await pendingDraft(tenant, [RULES[2]!]);
    const stored = Array.from({ length: 65 }, (_, i) =>
      rule(`o${i}`, 'allow', ['lookup'], [cond(`c${i}`, 'starts_with', `k${i}`)]),
    );
    await createDraftRepository(t.store.db).updateIf(tenant.orgId, old, 'pending_review', {
      rules: JSON.stringify(stored),
      updated_at: new Date().toISOString(),
    });
    const refused = await approve(tenant, old);
    expectError(refused, 400, 'validation_failed');
    expect(refused.json().error.message).toContain('this one holds 65');
    const still = await t.inject({ method: 'GET', url: `/v1/policy-drafts/${old}`, headers: h });
    expect(still.json().data.status).toBe('pending_review');
    expectError(await t.inject({ method: 'GET', url: '/v1/policies/lookup', headers: h }), 404, 'not_found');
  });

  it('approving a draft whose rules all skip changes no policy', async () => {
    const tenant = await createTenant(t);
    const id = await pendingDraft(tenant, [RULES[3]!]);
    const res = await approve(tenant, id);
    expect(res.json()).toMatchObject({ applied: [], skipped: [{ ruleId: 'escalate' }] });
    const list = await t.inject({ method: 'GET', url: '/v1/policies', headers: keyHeader(tenant.apiKey) });
    expect(list.json().data).toEqual([]);
  });
});
