import { describe, expect, it } from 'vitest';
import { collectEvents } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { OrgScope } from '../../lib/scope.js';
import { createPolicyRepository } from '../policies/repository.js';
import { createDraftRepository, type DraftRepository } from './repository.js';
import { createDraftService } from './service.js';

const t = useTestApp();

const UNKNOWN = '00000000-0000-7000-8000-000000000000';

const RULE = {
  id: 'cap',
  action: 'allow',
  tools: ['pay'],
  conditions: [{ field: 'arguments.amount', operator: 'less_than_or_equal', value: 100 }],
  severity: 'high',
};

const draftBody = (tenant: Tenant, extra: Record<string, unknown> = {}) => ({
  name: 'Payment caps',
  description: 'Limit payments',
  projectId: tenant.projectId,
  createdByAgentId: 'agent-7',
  rules: [RULE],
  ...extra,
});

async function createDraft(tenant: Tenant, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/policy-drafts',
    headers: keyHeader(tenant.apiKey),
    payload: draftBody(tenant, extra),
  });
  if (res.statusCode !== 201) throw new Error(res.body);
  return res.json().data.id;
}

const call = (tenant: Tenant, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, payload?: object) =>
  t.inject({ method, url: `/v1/policy-drafts${path}`, headers: keyHeader(tenant.apiKey), payload });

describe('POST /v1/policy-drafts', () => {
  it('creates a draft in status draft', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: keyHeader(tenant.apiKey),
      payload: draftBody(tenant),
    });
    expect(res.statusCode).toBe(201);
    const { data } = res.json();
    expect(data).toEqual({
      id: expect.any(String),
      organizationId: tenant.orgId,
      projectId: tenant.projectId,
      name: 'Payment caps',
      description: 'Limit payments',
      status: 'draft',
      createdByAgentId: 'agent-7',
      rules: [RULE],
      createdAt: expect.any(String),
      updatedAt: data.createdAt,
      reviewedBy: null,
      reviewedAt: null,
      revision: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
    });
    const viaUser = await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: asUser(tenant),
      payload: draftBody(tenant, { description: undefined, rules: [] }),
    });
    expect(viaUser.json().data).toMatchObject({ description: '', rules: [] });
  });

  it.each([
    [{ name: '' }, 'name'],
    [{ name: 'x'.repeat(201) }, 'name'],
    [{ name: 'a\u0001b' }, 'name'],
    [{ rules: [{ ...RULE, id: 'r\n1' }] }, 'rules/0/id'],
    [{ rules: [{ ...RULE, tools: ['pay\u0000'] }] }, 'rules/0/tools/0'],
    [{ description: 'x'.repeat(5001) }, 'description'],
    [{ projectId: 'nope' }, 'projectId'],
    [{ createdByAgentId: '' }, 'createdByAgentId'],
    [{ rules: 'all' }, 'rules'],
    [{ rules: [{ ...RULE, tools: 'pay' }] }, 'rules/0/tools'],
    [{ rules: [{ ...RULE, severity: undefined }] }, 'severity'],
    [{ rules: [{ ...RULE, conditions: [{ field: 'amount', value: 1 }] }] }, 'rules/0/conditions/0/operator'],
    [
      { rules: [{ ...RULE, conditions: [{ field: 'a', operator: 'is_huge', value: 1 }] }] },
      'rules/0/conditions/0/operator',
    ],
    [{ rules: [RULE, { ...RULE }] }, 'rules/1/id'],
  ])('rejects %j with 400 naming the field', async (extra, field) => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: keyHeader(tenant.apiKey),
      payload: draftBody(tenant, extra),
    });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
  });

  it('answers 404 for a project that is not the organization’s', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    for (const projectId of [UNKNOWN, b.projectId]) {
      expectError(
        await t.inject({
          method: 'POST',
          url: '/v1/policy-drafts',
          headers: keyHeader(a.apiKey),
          payload: draftBody(a, { projectId }),
        }),
        404,
        'not_found',
      );
    }
  });
});

describe('the pattern limit of a policy (64) on draft rules', () => {
  /** `n` rules for `tools`, each with one `contains` condition: one pattern each once compiled. */
  const patterned = (n: number, tools = ['pay'], from = 0) =>
    Array.from({ length: n }, (_, i) => ({
      id: `p${from + i}`,
      action: 'allow',
      tools,
      conditions: [{ field: `arguments.a${(from + i) % 7}`, operator: 'contains', value: `x${from + i}` }],
      severity: 'high',
    }));

  it('refuses, on create and on PATCH, rules that alone would give a tool more than 64 patterns', async () => {
    const tenant = await createTenant(t);
    // 64 are approvable; so are rules past 64 that compile to no more (duplicates, disabled rules).
    const within = [
      ...patterned(64, ['pay', 'refund']),
      { ...patterned(1, ['pay'], 0)[0]!, id: 'same-again' },
      { ...patterned(1, ['pay'], 64)[0]!, enabled: false },
    ];
    const id = await createDraft(tenant, { rules: within });
    const over = [...patterned(64), ...patterned(1, ['refund', 'pay'], 64)];
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policy-drafts',
      headers: keyHeader(tenant.apiKey),
      payload: draftBody(tenant, { rules: over }),
    });
    expectError(created, 400, 'validation_failed');
    expect(created.json().error.message).toContain('body/rules');
    expect(created.json().error.message).toContain('tool "pay"');
    expect(created.json().error.message).toContain('at most 64 patterns');
    expect(created.json().error.message).toContain('this one holds 65');
    expect(created.json().error.message).not.toContain('tool "refund"');

    const before = (await call(tenant, 'GET', `/${id}`)).json().data;
    const patched = await call(tenant, 'PATCH', `/${id}`, { name: 'More', rules: over });
    expectError(patched, 400, 'validation_failed');
    expect(patched.json().error.message).toContain('at most 64 patterns');
    expect((await call(tenant, 'GET', `/${id}`)).json().data).toEqual(before);
    expect((await call(tenant, 'GET', '')).json().data).toHaveLength(1);
  });
});

describe('GET /v1/policy-drafts', () => {
  it('lists the organization’s drafts, filtered by project and status', async () => {
    const tenant = await createTenant(t);
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId, name: 'Second' },
    });
    const d1 = await createDraft(tenant);
    const d2 = await createDraft(tenant, { projectId: second.json()._id });
    await call(tenant, 'POST', `/${d2}/submit`);
    const ids = async (query: string) =>
      (await call(tenant, 'GET', query)).json().data.map((d: { id: string }) => d.id);
    expect(await ids('')).toEqual([d1, d2]);
    expect(await ids(`?projectId=${tenant.projectId}`)).toEqual([d1]);
    expect(await ids('?status=pending_review')).toEqual([d2]);
    expect(await ids('?status=approved')).toEqual([]);
    expectError(await call(tenant, 'GET', '?status=done'), 400, 'validation_failed');
    expectError(await call(tenant, 'GET', '?projectId=x'), 400, 'validation_failed');
    const get = await call(tenant, 'GET', `/${d1}`);
    expect(get.json().data).toMatchObject({ id: d1, status: 'draft' });
    expectError(await call(tenant, 'GET', `/${UNKNOWN}`), 404, 'not_found');
  });
});

describe('PATCH /v1/policy-drafts/:id', () => {
  it('edits a draft in status draft', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const rules = [{ ...RULE, id: 'new', enabled: false }];
    const res = await call(tenant, 'PATCH', `/${id}`, { name: 'Renamed', description: 'd', rules });
    expect(res.statusCode).toBe(200);
    expect(res.json().data).toMatchObject({ name: 'Renamed', description: 'd', rules, status: 'draft' });
    expectError(await call(tenant, 'PATCH', `/${id}`, {}), 400, 'validation_failed');
    const same = await call(tenant, 'PATCH', `/${id}`, { status: 'draft' });
    expect(same.json().data.updatedAt).toBe(res.json().data.updatedAt);
    expectError(await call(tenant, 'PATCH', `/${id}`, { rules: [RULE, RULE] }), 400, 'validation_failed');
    expectError(await call(tenant, 'PATCH', `/${UNKNOWN}`, { name: 'x' }), 404, 'not_found');
  });

  it('allows only withdrawing a submitted draft; content changes only in draft', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const submit = await call(tenant, 'PATCH', `/${id}`, { status: 'pending_review' });
    expectError(submit, 400, 'validation_failed');
    expect(submit.json().error.message).toMatch(/submit/);
    expectError(await call(tenant, 'PATCH', `/${id}`, { status: 'approved' }), 400, 'validation_failed');
    await call(tenant, 'POST', `/${id}/submit`);
    const edit = await call(tenant, 'PATCH', `/${id}`, { name: 'sneaky' });
    expectError(edit, 400, 'validation_failed');
    expect(edit.json().error.message).toMatch(/withdraw/);
    const withdrawn = await call(tenant, 'PATCH', `/${id}`, { status: 'draft', name: 'Reworked' });
    expect(withdrawn.json().data).toMatchObject({ status: 'draft', name: 'Reworked' });
    await call(tenant, 'POST', `/${id}/submit`);
    await call(tenant, 'POST', `/${id}/reject`);
    expectError(await call(tenant, 'PATCH', `/${id}`, { status: 'draft' }), 400, 'validation_failed');
    expectError(await call(tenant, 'PATCH', `/${id}`, { description: 'x' }), 400, 'validation_failed');
  });
});

describe('DELETE, submit and reject', () => {
  it('deletes with 204 No Content', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const res = await call(tenant, 'DELETE', `/${id}`);
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
    expectError(await call(tenant, 'GET', `/${id}`), 404, 'not_found');
    expectError(await call(tenant, 'DELETE', `/${id}`), 404, 'not_found');
  });

  it('submits only from draft and announces it', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const seen = collectEvents(t, tenant.orgId);
    const res = await call(tenant, 'POST', `/${id}/submit`);
    seen.stop();
    expect(res.json().data.status).toBe('pending_review');
    expect(seen.events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'draft.submitted',
        data: { draftId: id, orgId: tenant.orgId, revision: expect.stringMatching(/^sha256:/) },
      },
    ]);
    const again = await call(tenant, 'POST', `/${id}/submit`);
    expectError(again, 400, 'validation_failed');
    expect(again.json().error.message).toMatch(/pending_review/);
    expectError(await call(tenant, 'POST', `/${UNKNOWN}/submit`), 404, 'not_found');
  });

  it('rejects from pending_review, recording the reviewer, and announces it', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    expectError(await call(tenant, 'POST', `/${id}/reject`), 400, 'validation_failed');
    await call(tenant, 'POST', `/${id}/submit`);
    const [key] = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    const seen = collectEvents(t, tenant.orgId);
    const res = await call(tenant, 'POST', `/${id}/reject`);
    seen.stop();
    expect(res.json().data).toMatchObject({
      status: 'rejected',
      reviewedBy: `apikey:${key.id}`,
      reviewedAt: expect.any(String),
    });
    expect(seen.events).toEqual([
      { organizationId: tenant.orgId, type: 'draft.rejected', data: { draftId: id } },
    ]);
    expectError(await call(tenant, 'POST', `/${id}/reject`), 400, 'validation_failed');

    const byUser = await createDraft(tenant);
    await call(tenant, 'POST', `/${byUser}/submit`);
    const rejected = await t.inject({
      method: 'POST',
      url: `/v1/policy-drafts/${byUser}/reject`,
      headers: asUser(tenant),
    });
    expect(rejected.json().data.reviewedBy).toBe(tenant.userId);
  });
});

describe('If-Match (the revision read) on PATCH, DELETE, submit and reject', () => {
  type Method = 'PATCH' | 'DELETE' | 'POST';
  const send = (tenant: Tenant, method: Method, path: string, ifMatch: string, payload?: object) =>
    t.inject({
      method,
      url: `/v1/policy-drafts${path}`,
      headers: { ...keyHeader(tenant.apiKey), 'if-match': ifMatch },
      ...(payload ? { payload } : {}),
    });
  const read = async (tenant: Tenant, id: string) => (await call(tenant, 'GET', `/${id}`)).json().data;

  it('PATCH applies only over the revision read: a stale one answers 409 and changes nothing', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const got = await call(tenant, 'GET', `/${id}`);
    const etag = got.headers.etag as string;
    expect(etag).toBe(`"${got.json().data.revision}"`);
    // Someone edits meanwhile (without If-Match: no precondition).
    const other = await call(tenant, 'PATCH', `/${id}`, { name: 'Edited meanwhile' });
    expect(other.statusCode).toBe(200);
    for (const payload of [{ name: 'Mine' }, { status: 'draft' }]) {
      const stale = await send(tenant, 'PATCH', `/${id}`, etag, payload);
      expectError(stale, 409, 'conflict');
      expect(stale.json().error.message).toContain('edited since the revision in If-Match');
    }
    expect(await read(tenant, id)).toMatchObject({
      name: 'Edited meanwhile',
      revision: other.json().data.revision,
    });
    // The revision as it is now applies, quoted as an ETag or bare; each answer gives the next one.
    const mine = await send(tenant, 'PATCH', `/${id}`, `"${other.json().data.revision}"`, { name: 'Mine' });
    expect(mine.json().data.name).toBe('Mine');
    const bare = await send(tenant, 'PATCH', `/${id}`, mine.json().data.revision, { description: 'bare' });
    expect(bare.json().data.description).toBe('bare');
    // `*` is no precondition; a list or a weak tag answers 400, as on approve.
    expect((await send(tenant, 'PATCH', `/${id}`, '*', { name: 'Any' })).statusCode).toBe(200);
    const revision = (await read(tenant, id)).revision;
    expectError(
      await send(tenant, 'PATCH', `/${id}`, `W/"${revision}"`, { name: 'w' }),
      400,
      'validation_failed',
    );
    expectError(
      await send(tenant, 'PATCH', `/${id}`, `"${revision}", "x"`, { name: 'w' }),
      400,
      'validation_failed',
    );
    expectError(await send(tenant, 'PATCH', `/${UNKNOWN}`, `"${revision}"`, { name: 'w' }), 404, 'not_found');
  });

  it('DELETE, submit and reject act only on the revision read', async () => {
    const tenant = await createTenant(t);
    const id = await createDraft(tenant);
    const seen = (await read(tenant, id)).revision as string;
    const edited = (await call(tenant, 'PATCH', `/${id}`, { name: 'Edited' })).json().data.revision;

    expectError(await send(tenant, 'DELETE', `/${id}`, `"${seen}"`), 409, 'conflict');
    const submitStale = await send(tenant, 'POST', `/${id}/submit`, `"${seen}"`);
    expectError(submitStale, 409, 'conflict');
    expect(submitStale.json().error.message).toContain('it was not submitted');
    expect((await read(tenant, id)).status).toBe('draft');

    expect((await send(tenant, 'POST', `/${id}/submit`, `"${edited}"`)).json().data.status).toBe(
      'pending_review',
    );
    expectError(await send(tenant, 'POST', `/${id}/reject`, `"${seen}"`), 409, 'conflict');
    expect((await read(tenant, id)).status).toBe('pending_review');
    // A status move keeps the revision: the one read before submitting still rejects.
    expect((await send(tenant, 'POST', `/${id}/reject`, edited)).json().data.status).toBe('rejected');

    expect((await send(tenant, 'DELETE', `/${id}`, `"${edited}"`)).statusCode).toBe(204);
    expectError(await send(tenant, 'DELETE', `/${id}`, `"${edited}"`), 404, 'not_found');
  });

  it('an edit that lands between the check and the write is caught too', async () => {
    const tenant = await createTenant(t);
    const scope: OrgScope = {
      organizationId: tenant.orgId,
      projectId: null,
      principal: { kind: 'user', userId: tenant.userId },
    };
    const repo = createDraftRepository(t.store.db);
    // Another writer edits the draft right after the service has read it.
    let race = false;
    const racing: DraftRepository = {
      ...repo,
      async get(organizationId, id, trx) {
        const row = await repo.get(organizationId, id, trx);
        if (row && race) {
          race = false;
          await repo.updateIf(organizationId, id, row.status, { name: `${row.name} (raced)` });
        }
        return row;
      },
    };
    const service = createDraftService({
      db: t.store.db,
      drafts: racing,
      policies: createPolicyRepository(t.store.db),
      cache: t.ctx.policies,
      events: t.ctx.events,
      clock: t.ctx.clock,
      projectExists: async () => true,
    });
    const id = await createDraft(tenant);
    race = true;
    await expect(
      service.update(scope, id, { name: 'Mine' }, (await read(tenant, id)).revision),
    ).rejects.toMatchObject({
      code: 'conflict',
    });
    expect((await read(tenant, id)).name).toBe('Payment caps (raced)');
    race = true;
    await expect(service.delete(scope, id, (await read(tenant, id)).revision)).rejects.toMatchObject({
      code: 'conflict',
    });
    expect((await read(tenant, id)).name).toBe('Payment caps (raced) (raced)');
  });
});

describe('tenant isolation', () => {
  it('another organization can neither see nor change a draft', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const id = await createDraft(a);
    await call(a, 'POST', `/${id}/submit`);
    expect((await call(b, 'GET', '')).json().data).toEqual([]);
    expect((await call(b, 'GET', `?projectId=${a.projectId}`)).json().data).toEqual([]);
    const attempts: ['GET' | 'POST' | 'PATCH' | 'DELETE', string, object?][] = [
      ['GET', `/${id}`],
      ['PATCH', `/${id}`, { status: 'draft' }],
      ['DELETE', `/${id}`],
      ['POST', `/${id}/submit`],
      ['POST', `/${id}/reject`],
    ];
    for (const [method, path, payload] of attempts)
      expectError(await call(b, method, path, payload), 404, 'not_found');
    expectError(
      await t.inject({ method: 'POST', url: `/v1/policy-drafts/${id}/approve`, headers: asUser(b) }),
      404,
      'not_found',
    );
    // b's user naming a's organization is not a member there.
    expectError(
      await t.inject({
        method: 'GET',
        url: `/v1/policy-drafts/${id}`,
        headers: { ...bearer(b.token), 'x-organization-id': a.orgId },
      }),
      403,
      'authorization_error',
    );
    expect((await call(a, 'GET', `/${id}`)).json().data.status).toBe('pending_review');
  });
});
