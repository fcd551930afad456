import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { decisionItem } from '../../../test/ledger.js';
import type { Clock } from '../../lib/clock.js';
import { createPolicyRepository } from '../policies/repository.js';

const TODAY = '2026-03-10T12:00:00.000Z';
let now = new Date(TODAY);
const clock: Clock = { now: () => now };

let a: Tenant;
let secondProjectKey: string;
const t = useTestApp({}, { clock });
beforeAll(async () => {
  a = await createTenant(t);
  await llmPolicy(a, 'email');

  await validate(a.apiKey, 'read', '2026-03-03T23:59:59.999Z'); // before a 7-day period
  await validate(a.apiKey, 'read', '2026-03-04T00:00:00.000Z'); // first day of a 7-day period
  await validate(a.apiKey, 'email', '2026-03-08T09:00:00.000Z'); // llm policy without a model: deny
  await escalated(a, '2026-03-08T23:59:59.999Z');
  await validate(a.apiKey, 'read', '2026-03-10T00:00:00.000Z');
  await validate(a.apiKey, 'read', '2026-03-10T11:59:00.000Z');
  await validate(a.apiKey, 'email', '2026-03-10T11:59:30.000Z');
  await validate(a.apiKey, 'read', '2026-03-11T00:00:00.000Z'); // after today: outside every period
  const p = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: bearer(a.token),
    payload: { organizationId: a.orgId, name: 'Second' },
  });
  secondProjectKey = p.json().apiKey;
  await validate(secondProjectKey, 'read', '2026-03-09T12:00:00.000Z');
  now = new Date(TODAY);
});

async function validate(key: string, toolName: string, at: string): Promise<void> {
  now = new Date(at);
  const res = await t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(key),
    payload: { tool_name: toolName, arguments: {} },
  });
  expect(res.statusCode).toBe(200);
}

async function llmPolicy(tenant: Tenant, toolName: string): Promise<void> {
  await createPolicyRepository(t.store.db).insert({
    organization_id: tenant.orgId,
    tool_name: toolName,
    project_id: null,
    version: 1,
    is_active: 1,
    mode: 'llm',
    constraints: '[]',
    session_constraints: null,
    llm_config: JSON.stringify({ description: 'internal recipients only' }),
    created_at: TODAY,
    updated_at: TODAY,
  });
  t.ctx.policies.invalidate(tenant.orgId, toolName);
}

/** A require_approval decision as the approvals flow will store it, written through the writer. */
async function escalated(tenant: Tenant, at: string): Promise<void> {
  await t.ctx.writer.write(
    decisionItem({
      organizationId: tenant.orgId,
      projectId: tenant.projectId,
      toolName: 'wire',
      decision: 'require_approval',
      reason: 'needs a human',
      at,
    }),
  );
}

const stats = (query = '', headers: Record<string, string> = keyHeader(a.apiKey)) =>
  t.inject({ method: 'GET', url: `/v1/decisions/stats${query}`, headers });

const day = (date: string, counts: Partial<Record<string, number>> = {}) => ({
  date,
  allowed: 0,
  denied: 0,
  escalated: 0,
  deterministic: 0,
  llm: 0,
  ...counts,
});

describe('GET /v1/decisions/stats', () => {
  it('counts the last 7 UTC days by default, today included, zero days included, oldest first', async () => {
    const res = await stats();
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      period: { days: 7 },
      summary: { total: 7, allowed: 4, denied: 2, escalated: 1, deterministic: 5, llm: 2 },
      breakdown: [
        day('2026-03-04', { allowed: 1, deterministic: 1 }),
        day('2026-03-05'),
        day('2026-03-06'),
        day('2026-03-07'),
        day('2026-03-08', { denied: 1, escalated: 1, deterministic: 1, llm: 1 }),
        day('2026-03-09', { allowed: 1, deterministic: 1 }),
        day('2026-03-10', { allowed: 2, denied: 1, deterministic: 2, llm: 1 }),
      ],
    });
    // Users see the same organization-wide figures.
    expect((await stats('', asUser(a))).json()).toEqual(res.json());
  });

  it('honours days and projectId', async () => {
    const one = (await stats('?days=1')).json();
    expect(one.period).toEqual({ days: 1 });
    expect(one.breakdown).toEqual([day('2026-03-10', { allowed: 2, denied: 1, deterministic: 2, llm: 1 })]);
    expect(one.summary.total).toBe(3);

    const ninety = (await stats('?days=90')).json();
    expect(ninety.breakdown).toHaveLength(90);
    expect(ninety.breakdown[0].date).toBe('2025-12-11');
    expect(ninety.breakdown[89].date).toBe('2026-03-10');
    expect(ninety.summary.total).toBe(8);

    const own = (await stats(`?projectId=${a.projectId}`)).json();
    expect(own.summary.total).toBe(6);
    expect(own.breakdown[5]).toEqual(day('2026-03-09'));
  });

  it.each([
    ['days=0', 'days'],
    ['days=91', 'days'],
    ['days=seven', 'days'],
    ['projectId=123', 'projectId'],
  ])('rejects %s with 400 naming the parameter', async (query, name) => {
    const res = await stats(`?${query}`);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(name);
  });

  it('needs authentication and counts only the caller organization', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/decisions/stats' }), 401, 'unauthorized');
    const b = await createTenant(t);
    const other = (await stats('', keyHeader(b.apiKey))).json();
    expect(other.summary).toEqual({
      total: 0,
      allowed: 0,
      denied: 0,
      escalated: 0,
      deterministic: 0,
      llm: 0,
    });
    expect(other.breakdown).toHaveLength(7);
    expect((await stats(`?projectId=${a.projectId}`, keyHeader(b.apiKey))).json().summary.total).toBe(0);
  });
});
