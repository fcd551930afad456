import type { PolicyDefinition } from '@svc/policy-engine';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { computeReceiptHash } from '../../ledger/receipt.js';
import type { Clock } from '../../lib/clock.js';
import { createPolicyRepository } from '../policies/repository.js';

// A settable clock: decisions get the timestamps the date filters are tested against.
let now = new Date('2026-11-21T12:00:00.000Z');
const clock: Clock = { now: () => now };

const t = useTestApp({}, { clock });

const UNKNOWN = '00000000-0000-7000-8000-000000000000';

async function validate(tenant: Tenant, toolName: string, args: Record<string, unknown>, at?: string) {
  if (at) now = new Date(at);
  const res = await t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: toolName, arguments: args, context: { session_id: 's1' } },
  });
  expect(res.statusCode).toBe(200);
  return res.json().metadata.decision_id as string;
}

async function denyPolicy(tenant: Tenant, toolName: string): Promise<void> {
  const def: PolicyDefinition = {
    mode: 'deterministic',
    constraints: [{ argumentName: 'amount', enabled: true, maximum: 10 }],
  };
  await createPolicyRepository(t.store.db).insert({
    organization_id: tenant.orgId,
    tool_name: toolName,
    project_id: null,
    version: 1,
    is_active: 1,
    mode: def.mode,
    constraints: JSON.stringify(def.constraints),
    session_constraints: null,
    llm_config: null,
    created_at: now.toISOString(),
    updated_at: now.toISOString(),
  });
  t.ctx.policies.invalidate(tenant.orgId, toolName);
}

const list = (headers: Record<string, string>, query = '') =>
  t.inject({ method: 'GET', url: `/v1/decisions${query}`, headers });

describe('GET /v1/decisions', () => {
  let a: Tenant;
  let second: { projectId: string; apiKey: string };
  const ids: string[] = [];
  beforeAll(async () => {
    a = await createTenant(t);
    await denyPolicy(a, 'pay');
    ids.push(await validate(a, 'read', { path: '/a' }, '2026-11-19T08:00:00.000Z'));
    ids.push(await validate(a, 'pay', { amount: 50 }, '2026-11-20T23:59:59.999Z'));
    ids.push(await validate(a, 'pay', { amount: 5 }, '2026-11-21T00:00:00.000Z'));
    const p = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: bearer(a.token),
      payload: { organizationId: a.orgId, name: 'Second' },
    });
    second = { projectId: p.json()._id, apiKey: p.json().apiKey };
    ids.push(
      await validate({ ...a, apiKey: second.apiKey }, 'read', { path: '/b' }, '2026-11-21T10:00:00.000Z'),
    );
  });

  it('lists the organization decisions newest first, with the documented fields', async () => {
    const res = await list(keyHeader(a.apiKey));
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.pagination).toEqual({ total: 4, limit: 50, offset: 0, hasMore: false });
    expect(body.data.map((d: { id: string }) => d.id)).toEqual([...ids].reverse());
    const denied = body.data.find((d: { id: string }) => d.id === ids[1]);
    expect(denied).toMatchObject({
      id: ids[1],
      projectId: a.projectId,
      toolName: 'pay',
      arguments: { amount: 50 },
      context: { session_id: 's1' },
      decision: 'deny',
      mode: 'deterministic',
      failedArgument: 'amount',
      matchedException: null,
      policyVersion: 1,
      createdAt: '2026-11-20T23:59:59.999Z',
    });
    expect(denied.reason).toEqual(expect.any(String));
    expect(denied.latencyMs).toBeGreaterThanOrEqual(0);
    expect(denied.validations).toEqual([
      expect.objectContaining({ parameter: 'amount', constraint_type: 'range', actual: 50 }),
    ]);
    expect(denied.receipt).toEqual({
      receipt_id: expect.any(String),
      receipt_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      previous_receipt_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      merkle_root: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
    });
    const allowed = body.data.find((d: { id: string }) => d.id === ids[0]);
    expect(allowed).toMatchObject({ decision: 'allow', validations: null, failedArgument: null });
  });

  it('shows users the same organization-wide list', async () => {
    const res = await list(asUser(a));
    expect(res.json().pagination.total).toBe(4);
    expectError(await list(bearer(a.token)), 400, 'missing_organization');
  });

  it('pages with limit and offset', async () => {
    const first = (await list(keyHeader(a.apiKey), '?limit=3')).json();
    expect(first.pagination).toEqual({ total: 4, limit: 3, offset: 0, hasMore: true });
    expect(first.data).toHaveLength(3);
    const rest = (await list(keyHeader(a.apiKey), '?limit=3&offset=3')).json();
    expect(rest.pagination).toEqual({ total: 4, limit: 3, offset: 3, hasMore: false });
    expect(rest.data.map((d: { id: string }) => d.id)).toEqual([ids[0]]);
    const past = (await list(keyHeader(a.apiKey), '?offset=10')).json();
    expect(past).toEqual({ data: [], pagination: { total: 4, limit: 50, offset: 10, hasMore: false } });
  });

  it.each([
    ['?projectId=P2', [3]],
    ['?toolName=pay', [2, 1]],
    ['?decision=deny', [1]],
    ['?decision=allow&toolName=pay', [2]],
    ['?decision=require_approval', []],
    ['?startDate=2026-11-21', [3, 2]],
    ['?endDate=2026-11-20', [1, 0]],
    ['?startDate=2026-11-20&endDate=2026-11-20', [1]],
    ['?endDate=2026-11-20T23:59:59.999Z', [1, 0]],
    ['?endDate=2026-11-20T23:59:59.998Z', [0]],
    ['?startDate=2026-11-21T02:00:00%2B02:00', [3, 2]],
    ['?startDate=2026-11-21T10:00:00', [3]],
    ['?endDate=9999-12-31', [3, 2, 1, 0]],
    ['?startDate=0001-01-01&endDate=9999-12-31T23:59:59.999Z', [3, 2, 1, 0]],
  ])('filters %s', async (query, expected) => {
    const res = await list(keyHeader(a.apiKey), query.replace('P2', second.projectId));
    expect(res.statusCode).toBe(200);
    expect(res.json().data.map((d: { id: string }) => d.id)).toEqual(expected.map((i) => ids[i]));
    expect(res.json().pagination.total).toBe(expected.length);
  });

  it('scopes a project key to nothing less than its organization; projectId filters', async () => {
    const viaSecond = await list(keyHeader(second.apiKey));
    expect(viaSecond.json().pagination.total).toBe(4);
    const unknown = await list(keyHeader(a.apiKey), `?projectId=${UNKNOWN}`);
    expect(unknown.json().data).toEqual([]);
  });

  it.each([
    ['limit=0', 'limit'],
    ['limit=101', 'limit'],
    ['limit=abc', 'limit'],
    ['limit=1.5', 'limit'],
    ['offset=-1', 'offset'],
    ['projectId=not-a-uuid', 'projectId'],
    ['decision=maybe', 'decision'],
    ['startDate=yesterday', 'startDate'],
    ['startDate=2026-02-30', 'startDate'],
    ['endDate=2026-11-21T25:00:00Z', 'endDate'],
    ['startDate=9999-12-31T23:30:00-01:00', 'startDate'],
    ['startDate=2026-11-22&endDate=2026-11-21', 'startDate'],
    ['toolName=', 'toolName'],
  ])('rejects %s with 400 naming the parameter', async (query, name) => {
    const res = await list(keyHeader(a.apiKey), `?${query}`);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(name);
  });

  it('needs authentication', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/decisions' }), 401, 'unauthorized');
    expectError(await list(keyHeader('svc_nope')), 401, 'invalid_api_key');
  });
});

describe('GET /v1/decisions/:id and /:id/receipt', () => {
  it('returns one decision and its full receipt', async () => {
    const a = await createTenant(t);
    const id = await validate(a, 'read', { path: '/x' }, '2026-11-21T11:00:00.000Z');
    const one = await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: keyHeader(a.apiKey) });
    expect(one.statusCode).toBe(200);
    expect(one.json()).toMatchObject({ id, toolName: 'read', decision: 'allow', projectId: a.projectId });
    const viaUser = await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: asUser(a) });
    expect(viaUser.json()).toEqual(one.json());

    const res = await t.inject({
      method: 'GET',
      url: `/v1/decisions/${id}/receipt`,
      headers: keyHeader(a.apiKey),
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const receipt = res.json();
    expect(receipt).toMatchObject({
      schema: 'svc.receipt/1',
      decision_id: id,
      tool_name: 'read',
      organization_id: a.orgId,
      sequence: 0,
      timestamp: '2026-11-21T11:00:00.000Z',
      ...one.json().receipt,
    });
    expect(receipt.argument_hash).toMatch(/^sha256:/);
    expect(computeReceiptHash(receipt)).toBe(receipt.receipt_hash);
  });

  it('answers 400 for a malformed id and 404 for an unknown one', async () => {
    const a = await createTenant(t);
    for (const suffix of ['', '/receipt']) {
      const bad = await t.inject({
        method: 'GET',
        url: `/v1/decisions/nope${suffix}`,
        headers: keyHeader(a.apiKey),
      });
      expectError(bad, 400, 'validation_failed');
      expect(bad.json().error.message).toContain('id');
      expectError(
        await t.inject({
          method: 'GET',
          url: `/v1/decisions/${UNKNOWN}${suffix}`,
          headers: keyHeader(a.apiKey),
        }),
        404,
        'not_found',
      );
      expectError(
        await t.inject({ method: 'GET', url: `/v1/decisions/${UNKNOWN}${suffix}` }),
        401,
        'unauthorized',
      );
    }
  });
});

describe('tenant isolation', () => {
  it('never shows one organization the decisions of another', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const id = await validate(a, 'secret', { x: 1 }, '2026-11-21T11:30:00.000Z');
    for (const headers of [keyHeader(b.apiKey), asUser(b)]) {
      const listed = await list(headers);
      expect(listed.json().data).toEqual([]);
      const filtered = await list(headers, `?projectId=${a.projectId}`);
      expect(filtered.json().pagination.total).toBe(0);
      for (const suffix of ['', '/receipt']) {
        expectError(
          await t.inject({ method: 'GET', url: `/v1/decisions/${id}${suffix}`, headers }),
          404,
          'not_found',
        );
      }
      const stats = await t.inject({ method: 'GET', url: '/v1/decisions/stats', headers });
      expect(stats.json().summary.total).toBe(0);
    }
    // b's user naming a's organization is refused outright.
    const foreign = { ...bearer(b.token), 'x-organization-id': a.orgId };
    expectError(await list(foreign), 403, 'authorization_error');
    expectError(
      await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: foreign }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'GET', url: `/v1/decisions/${id}/receipt`, headers: foreign }),
      403,
      'authorization_error',
    );
  });
});
