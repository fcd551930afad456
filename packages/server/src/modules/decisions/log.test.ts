import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { Clock } from '../../lib/clock.js';
import { createPolicyRepository } from '../policies/repository.js';

// A fixed clock keeps the 120-per-minute window from rolling over in the middle of a test.
const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };

const t = useTestApp({}, { clock });

const BODY = {
  tool_name: 'pay',
  arguments: { amount: 5 },
  decision: 'allow',
  mode: 'deterministic',
  latency_ms: 0.42,
  source: 'client',
  context: { session_id: 's1', agent_id: 'a1' },
};

const log = (headers: Record<string, string>, payload: unknown = BODY) =>
  t.inject({ method: 'POST', url: '/v1/decisions', headers, payload: payload as object });

async function newKey(tenant: Tenant): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: keyHeader(tenant.apiKey),
    payload: { name: 'sdk', projectId: tenant.projectId },
  });
  return res.json().key;
}

async function chainOf(orgId: string): Promise<string[]> {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', orgId)
    .orderBy('sequence')
    .execute();
  return rows.map((r) => r.payload);
}

describe('POST /v1/decisions', () => {
  it('records a client decision with a receipt in the organization chain, bound to the current policy', async () => {
    const a = await createTenant(t);
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(a.apiKey),
      payload: { tool_name: 'read', arguments: {} },
    });
    await createPolicyRepository(t.store.db).insert({
      organization_id: a.orgId,
      tool_name: 'pay',
      project_id: null,
      version: 3,
      is_active: 1,
      mode: 'deterministic',
      constraints: JSON.stringify([{ argumentName: 'amount', enabled: true, maximum: 10 }]),
      session_constraints: null,
      llm_config: null,
      created_at: '2026-11-21T00:00:00.000Z',
      updated_at: '2026-11-21T00:00:00.000Z',
    });
    t.ctx.policies.invalidate(a.orgId, 'pay');

    const res = await log(keyHeader(a.apiKey), { ...BODY, context: { ...BODY.context, source: 'server' } });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toEqual({ success: true, id: expect.any(String) });
    expect(res.headers['x-ratelimit-limit']).toBe('120');
    const id = res.json().id;

    const got = await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: asUser(a) });
    expect(got.json()).toMatchObject({
      id,
      projectId: a.projectId,
      toolName: 'pay',
      arguments: { amount: 5 },
      context: { session_id: 's1', agent_id: 'a1', source: 'client' },
      decision: 'allow',
      mode: 'deterministic',
      reason: 'Allowed by the client',
      validations: null,
      latencyMs: 0.42,
      policyVersion: 3,
      createdAt: '2026-11-21T12:00:30.000Z',
    });
    const receipt = (
      await t.inject({ method: 'GET', url: `/v1/decisions/${id}/receipt`, headers: keyHeader(a.apiKey) })
    ).json();
    expect(receipt).toMatchObject({
      source: 'client',
      decision: 'allow',
      sequence: 1,
      policy_version: 3,
      policy_hash: expect.stringMatching(/^sha256:/),
    });
    const report = await verifyReceipts(await chainOf(a.orgId));
    expect(report).toMatchObject({ ok: true, count: 2 });
  });

  it('keeps the reason given and records denials', async () => {
    const a = await createTenant(t);
    const res = await log(keyHeader(a.apiKey), { ...BODY, decision: 'deny', reason: 'amount over 10' });
    expect(res.statusCode).toBe(201);
    const got = await t.inject({
      method: 'GET',
      url: `/v1/decisions/${res.json().id}`,
      headers: keyHeader(a.apiKey),
    });
    expect(got.json()).toMatchObject({ decision: 'deny', reason: 'amount over 10', policyVersion: null });
    const listed = await t.inject({
      method: 'GET',
      url: '/v1/decisions?decision=deny',
      headers: keyHeader(a.apiKey),
    });
    expect(listed.json().pagination.total).toBe(1);
  });

  it.each([
    [{ ...BODY, tool_name: undefined }, 'tool_name'],
    [{ ...BODY, tool_name: '' }, 'tool_name'],
    [{ ...BODY, tool_name: 'x'.repeat(201) }, 'tool_name'],
    [{ ...BODY, arguments: undefined }, 'arguments'],
    [{ ...BODY, arguments: [1] }, 'arguments'],
    [{ ...BODY, decision: 'require_approval' }, 'decision'],
    [{ ...BODY, decision: undefined }, 'decision'],
    [{ ...BODY, mode: 'llm' }, 'mode'],
    [{ ...BODY, mode: undefined }, 'mode'],
    [{ ...BODY, latency_ms: -1 }, 'latency_ms'],
    [{ ...BODY, latency_ms: '3' }, 'latency_ms'],
    [{ ...BODY, latency_ms: undefined }, 'latency_ms'],
    [{ ...BODY, source: 'server' }, 'source'],
    [{ ...BODY, source: undefined }, 'source'],
    [{ ...BODY, context: 'x' }, 'context'],
    [{ ...BODY, reason: 'r'.repeat(2001) }, 'reason'],
  ])('rejects a body with a bad %# field with 400 naming it, records nothing', async (payload, field) => {
    const a = await createTenant(t);
    const res = await log(keyHeader(a.apiKey), payload);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
    expect(res.headers['x-ratelimit-remaining']).toBe('119');
    expect(await chainOf(a.orgId)).toEqual([]);
  });

  it('needs an API key: users get 403, no credentials 401', async () => {
    const a = await createTenant(t);
    expectError(await log(asUser(a)), 403, 'authorization_error');
    expectError(await log({}), 401, 'unauthorized');
    expectError(await log(keyHeader('svc_nope')), 401, 'invalid_api_key');
  });

  it('answers 400 missing_project for a key without a project', async () => {
    const a = await createTenant(t);
    const key = await newKey(a);
    // Such keys cannot be created through the API; older or imported keys may exist.
    await t.store.db
      .updateTable('api_keys')
      .set({ project_id: null })
      .where('organization_id', '=', a.orgId)
      .where('name', '=', 'sdk')
      .execute();
    expectError(await log(keyHeader(key)), 400, 'missing_project');
    expect(await chainOf(a.orgId)).toEqual([]);
  });

  it('allows 120 requests per minute per key, then 429 with the rate-limit headers', async () => {
    const a = await createTenant(t);
    const key = await newKey(a);
    const results = await Promise.all(Array.from({ length: 120 }, () => log(keyHeader(key))));
    expect(results.every((r) => r.statusCode === 201)).toBe(true);
    const over = await log(keyHeader(key));
    expectError(over, 429, 'rate_limit_exceeded');
    expect(over.headers['x-ratelimit-limit']).toBe('120');
    expect(over.headers['x-ratelimit-remaining']).toBe('0');
    expect(Number(over.headers['retry-after'])).toBe(30);
    // The budget is per key, and separate from validation's.
    expect((await log(keyHeader(a.apiKey))).statusCode).toBe(201);
    const validate = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(key),
      payload: { tool_name: 'x', arguments: {} },
    });
    expect(validate.statusCode).toBe(200);
    expect((await verifyReceipts(await chainOf(a.orgId))).count).toBe(122);
  });

  it('records into the caller organization only', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const res = await log(keyHeader(b.apiKey));
    expect(await chainOf(a.orgId)).toEqual([]);
    expect(await chainOf(b.orgId)).toHaveLength(1);
    expectError(
      await t.inject({ method: 'GET', url: `/v1/decisions/${res.json().id}`, headers: keyHeader(a.apiKey) }),
      404,
      'not_found',
    );
  });
});

describe('POST /v1/decisions when the store fails', () => {
  it('answers 503 service_unavailable, never 201', async () => {
    const a = await createTenant(t);
    // A commit failure cannot be provoked on a healthy store; the durable write is made to fail.
    const spy = vi.spyOn(t.ctx.writer, 'write').mockRejectedValueOnce(new Error('disk full'));
    try {
      expectError(await log(keyHeader(a.apiKey)), 503, 'service_unavailable');
    } finally {
      spy.mockRestore();
    }
    expect(await chainOf(a.orgId)).toEqual([]);
  });
});
