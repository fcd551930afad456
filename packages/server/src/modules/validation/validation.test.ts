import type { PolicyDefinition } from '@svc/policy-engine';
import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import {
  ADMIN_TOKEN,
  bearer,
  createTenant,
  expectError,
  keyHeader,
  type Tenant,
} from '../../../test/helpers.js';
import type { Clock } from '../../lib/clock.js';
import { createPolicyRepository } from '../policies/repository.js';

const t = useTestApp();

async function putPolicy(
  tenant: Tenant,
  toolName: string,
  def: PolicyDefinition,
  active = true,
): Promise<void> {
  const now = new Date().toISOString();
  const repo = createPolicyRepository(t.store.db);
  await repo.delete(tenant.orgId, toolName);
  await repo.insert({
    organization_id: tenant.orgId,
    tool_name: toolName,
    project_id: null,
    version: 1,
    is_active: active ? 1 : 0,
    mode: def.mode,
    constraints: JSON.stringify(def.constraints ?? []),
    session_constraints: def.sessionConstraints ? JSON.stringify(def.sessionConstraints) : null,
    llm_config: def.llmConfig ? JSON.stringify(def.llmConfig) : null,
    created_at: now,
    updated_at: now,
  });
  t.ctx.policies.invalidate(tenant.orgId, toolName);
}

const validate = (key: string, payload: unknown) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(key),
    payload: payload as object,
  });

const PAYMENT: PolicyDefinition = {
  mode: 'deterministic',
  constraints: [
    { argumentName: 'amount', enabled: true, required: true, minimum: 0, maximum: 100 },
    { argumentName: 'currency', enabled: true, enum: ['USD', 'EUR'] },
    { argumentName: 'memo', enabled: true, regex: '^[a-z ]*$' },
  ],
};

describe('POST /v1/tools/validate', () => {
  it('allows a call to a tool without a policy, says so, and records it with a receipt', async () => {
    const tenant = await createTenant(t);
    const res = await validate(tenant.apiKey, {
      tool_name: 'read_file',
      arguments: { path: '/tmp/x' },
      context: { session_id: 's1' },
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      decision: 'allow',
      metadata: { policy_version: null, mode: 'deterministic' },
    });
    expect(body.reason).toMatch(/no policy/i);
    expect(body.latency_ms).toBeGreaterThanOrEqual(0);
    const row = await t.store.db
      .selectFrom('decisions')
      .selectAll()
      .where('id', '=', body.metadata.decision_id)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({
      organization_id: tenant.orgId,
      project_id: tenant.projectId,
      decision: 'allow',
      source: 'server',
      tool_name: 'read_file',
    });
    expect(JSON.parse(row.arguments)).toEqual({ path: '/tmp/x' });
    expect(row.receipt_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    const receipt = await t.store.db
      .selectFrom('receipts')
      .selectAll()
      .where('receipt_id', '=', row.receipt_id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(receipt.payload)).toMatchObject({
      schema: 'svc.receipt/1',
      decision_id: row.id,
      tool_name: 'read_file',
      sequence: 0,
    });
  });

  it('denies with every failed constraint, allows what passes', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'pay', PAYMENT);
    const ok = await validate(tenant.apiKey, {
      tool_name: 'pay',
      arguments: { amount: 50, currency: 'USD', memo: 'rent' },
    });
    expect(ok.json()).toMatchObject({ decision: 'allow', metadata: { policy_version: 1 } });
    expect(ok.json().failed_constraints).toBeUndefined();

    const bad = await validate(tenant.apiKey, {
      tool_name: 'pay',
      arguments: { amount: 500, currency: 'GBP', memo: 'Rent!' },
    });
    const body = bad.json();
    expect(body.decision).toBe('deny');
    expect(body.reason).toEqual(expect.any(String));
    expect(
      body.failed_constraints.map((f: { parameter: string; constraint_type: string }) => [
        f.parameter,
        f.constraint_type,
      ]),
    ).toEqual([
      ['amount', 'range'],
      ['currency', 'enum'],
      ['memo', 'regex'],
    ]);
    for (const f of body.failed_constraints)
      expect(Object.keys(f).sort()).toEqual([
        'actual',
        'constraint_type',
        'expected',
        'message',
        'parameter',
      ]);

    const row = await t.store.db
      .selectFrom('decisions')
      .selectAll()
      .where('id', '=', body.metadata.decision_id)
      .executeTakeFirstOrThrow();
    expect(row.decision).toBe('deny');
    expect(row.failed_argument).toBe('amount');
    expect(JSON.parse(row.validations!)).toHaveLength(3);
  });

  it('does not coerce types: a numeric string fails a numeric bound', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'pay', PAYMENT);
    const res = await validate(tenant.apiKey, { tool_name: 'pay', arguments: { amount: '50' } });
    expect(res.json().decision).toBe('deny');
    expect(res.json().failed_constraints[0]).toMatchObject({ parameter: 'amount', constraint_type: 'type' });
  });

  it('skips an inactive policy and says so', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'pay', PAYMENT, false);
    const res = await validate(tenant.apiKey, { tool_name: 'pay', arguments: { amount: 1e9 } });
    expect(res.json().decision).toBe('allow');
    expect(res.json().reason).toMatch(/inactive/);
  });

  it('fails closed on llm policies (no model configured) and on approval constraints of a free plan', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'email', { mode: 'llm', llmConfig: { description: 'Only internal recipients' } });
    const llm = await validate(tenant.apiKey, { tool_name: 'email', arguments: { to: 'a@b.c' } });
    expect(llm.json()).toMatchObject({ decision: 'deny', metadata: { mode: 'llm' } });
    expect(llm.json().reason).toMatch(/model/i);

    await putPolicy(tenant, 'wire', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 10, action: 'require_approval' }],
    });
    const esc = await validate(tenant.apiKey, { tool_name: 'wire', arguments: { amount: 11 } });
    expect(esc.json().decision).toBe('deny');
    expect(esc.json().reason).toMatch(/amount: .*human approval is required, but .*Team plan/);
    expect(esc.json().approval_id).toBeUndefined();
    const opened = await t.store.db
      .selectFrom('approvals')
      .select('id')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(opened).toEqual([]);
  });

  it('needs an API key: user tokens get 403, no credentials 401', async () => {
    const tenant = await createTenant(t);
    const body = { tool_name: 'x', arguments: {} };
    expectError(
      await t.inject({ method: 'POST', url: '/v1/tools/validate', payload: body }),
      401,
      'unauthorized',
    );
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: { ...bearer(tenant.token), 'x-organization-id': tenant.orgId },
        payload: body,
      }),
      403,
      'authorization_error',
    );
  });

  it.each([
    [{ arguments: {} }, 'tool_name'],
    [{ tool_name: '', arguments: {} }, 'tool_name'],
    [{ tool_name: 'x' }, 'arguments'],
    [{ tool_name: 'x', arguments: [] }, 'arguments'],
    [{ tool_name: 'x', arguments: 'a=1' }, 'arguments'],
    [{ tool_name: 'x', arguments: {}, context: 5 }, 'context'],
  ])('rejects %j with 400 naming the field, records nothing', async (payload, field) => {
    const tenant = await createTenant(t);
    const res = await validate(tenant.apiKey, payload);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
    expect(res.headers['x-ratelimit-limit']).toBe('60');
    const rows = await t.store.db
      .selectFrom('decisions')
      .select('id')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(rows).toEqual([]);
  });
});

// A fixed clock keeps the per-minute window from rolling over between the 60th and the 61st call.
describe('POST /v1/tools/validate rate limits', () => {
  const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };
  const t = useTestApp({}, { clock });
  const validate = (key: string, payload: unknown) =>
    t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(key),
      payload: payload as object,
    });

  it('rate-limits per key by tier with X-RateLimit headers on every response', async () => {
    const tenant = await createTenant(t);
    let last = null as Awaited<ReturnType<typeof validate>> | null;
    for (let i = 0; i < 60; i++) {
      last = await validate(tenant.apiKey, { tool_name: 'x', arguments: {} });
      expect(last.statusCode).toBe(200);
    }
    expect(last!.headers['x-ratelimit-limit']).toBe('60');
    expect(last!.headers['x-ratelimit-remaining']).toBe('0');
    // The window ends at the next full minute of the clock: 12:01:00.
    expect(last!.headers['x-ratelimit-reset']).toBe(String(Date.parse('2026-11-21T12:01:00.000Z') / 1000));
    const over = await validate(tenant.apiKey, { tool_name: 'x', arguments: {} });
    expectError(over, 429, 'rate_limit_exceeded');
    expect(over.headers['x-ratelimit-remaining']).toBe('0');
    expect(over.headers['retry-after']).toBe('30');

    // Team tier: 600.
    await t.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${tenant.orgId}`,
      headers: bearer(ADMIN_TOKEN),
      payload: { tier: 'team' },
    });
    const other = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'k2', projectId: tenant.projectId },
    });
    const team = await validate(other.json().key, { tool_name: 'x', arguments: {} });
    expect(team.headers['x-ratelimit-limit']).toBe('600');
    // Enterprise: the organization's custom rate.
    await t.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${tenant.orgId}`,
      headers: bearer(ADMIN_TOKEN),
      payload: { tier: 'enterprise', rateLimitPerMinute: 5000 },
    });
    const ent = await validate(other.json().key, { tool_name: 'x', arguments: {} });
    expect(ent.headers['x-ratelimit-limit']).toBe('5000');
  });

  it('counts and marks answers refused while the body is read (not JSON, too large, not JSON at all)', async () => {
    const tenant = await createTenant(t);
    const raw = (payload: string, contentType = 'application/json') =>
      t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: { ...keyHeader(tenant.apiKey), 'content-type': contentType },
        payload,
      });
    const answers = [
      [await raw('garbage'), 400, 'invalid_json'],
      [await raw('{"__proto__":{}}'), 400, 'invalid_json'],
      [await raw('x', 'text/plain'), 415, 'unsupported_media_type'],
      [await raw(`"${'x'.repeat(1024 * 1024)}"`), 413, 'payload_too_large'],
      [await validate(tenant.apiKey, { tool_name: 5 }), 400, 'validation_failed'],
    ] as const;
    answers.forEach(([res, status, code], i) => {
      expectError(res, status, code);
      expect(res.headers['x-ratelimit-remaining']).toBe(String(59 - i));
    });
  });
});

describe('session constraints', () => {
  it('allows exactly maxCalls of 100 parallel calls in one session', async () => {
    const tenant = await createTenant(t);
    await t.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${tenant.orgId}`,
      headers: bearer(ADMIN_TOKEN),
      payload: { tier: 'team' },
    });
    await putPolicy(tenant, 'search', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { maxCalls: 10 },
    });
    const results = await Promise.all(
      Array.from({ length: 100 }, () =>
        validate(tenant.apiKey, { tool_name: 'search', arguments: {}, context: { session_id: 'S' } }),
      ),
    );
    const decisions = results.map((r) => r.json().decision);
    expect(decisions.filter((d) => d === 'allow')).toHaveLength(10);
    expect(decisions.filter((d) => d === 'deny')).toHaveLength(90);
    const denied = results.find((r) => r.json().decision === 'deny')!.json();
    expect(denied.failed_constraints[0].constraint_type).toBe('max_calls');
    // Another session has its own budget.
    const other = await validate(tenant.apiKey, {
      tool_name: 'search',
      arguments: {},
      context: { session_id: 'T' },
    });
    expect(other.json().decision).toBe('allow');
    const counter = await t.store.db
      .selectFrom('session_counters')
      .selectAll()
      .where('organization_id', '=', tenant.orgId)
      .where('session_id', '=', 'S')
      .executeTakeFirstOrThrow();
    expect(counter.calls).toBe(10);
  });

  it('enforces cumulative limits across calls and requires a session id', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'spend', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { cumulativeLimits: [{ argumentName: 'amount', maxValue: 100 }] },
    });
    const call = (amount: number) =>
      validate(tenant.apiKey, { tool_name: 'spend', arguments: { amount }, context: { session_id: 'c' } });
    expect((await call(60)).json().decision).toBe('allow');
    expect((await call(40)).json().decision).toBe('allow');
    const over = await call(1);
    expect(over.json().decision).toBe('deny');
    expect(over.json().failed_constraints[0].constraint_type).toBe('cumulative_limit');
    const noSession = await validate(tenant.apiKey, { tool_name: 'spend', arguments: { amount: 1 } });
    expect(noSession.json().decision).toBe('deny');
    expect(noSession.json().failed_constraints[0].parameter).toBe('context.session_id');
  });
});

describe('receipts and isolation', () => {
  it('links every decision of an organization into one verifiable chain', async () => {
    const tenant = await createTenant(t);
    await putPolicy(tenant, 'pay', PAYMENT);
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        validate(tenant.apiKey, { tool_name: 'pay', arguments: { amount: i * 5 } }),
      ),
    );
    const rows = await t.store.db
      .selectFrom('receipts')
      .select(['payload', 'sequence'])
      .where('organization_id', '=', tenant.orgId)
      .orderBy('sequence')
      .execute();
    expect(rows.map((r) => Number(r.sequence))).toEqual(Array.from({ length: 40 }, (_, i) => i));
    const report = await verifyReceipts(rows.map((r) => r.payload));
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.count).toBe(40);
  });

  it('never applies or records across organizations', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    await putPolicy(a, 'pay', PAYMENT);
    const res = await validate(b.apiKey, { tool_name: 'pay', arguments: { amount: 1e9 } });
    expect(res.json().decision).toBe('allow');
    const aRows = await t.store.db
      .selectFrom('decisions')
      .select('id')
      .where('organization_id', '=', a.orgId)
      .execute();
    expect(aRows).toEqual([]);
    const bRows = await t.store.db
      .selectFrom('receipts')
      .select('sequence')
      .where('organization_id', '=', b.orgId)
      .execute();
    expect(bRows.map((r) => Number(r.sequence))).toEqual([0]);
  });
});
