import { describe, expect, it } from 'vitest';
import { setTier } from '../../test/approvals.js';
import { useTestApp } from '../../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../../test/helpers.js';

const t = useTestApp();

const send = (tenant: Tenant, method: 'GET' | 'POST' | 'PUT', url: string, payload?: object) =>
  t.inject({ method, url, headers: keyHeader(tenant.apiKey), ...(payload ? { payload } : {}) });

describe('what POST /v1/tools/validate records', () => {
  it('names no policy version or hash for a call under an inactive policy', async () => {
    const tenant = await createTenant(t);
    const constraints = [{ argumentName: 'a', maximum: 1 }];
    expect((await send(tenant, 'POST', '/v1/policies', { toolName: 'pv', constraints })).statusCode).toBe(
      201,
    );
    expect((await send(tenant, 'PUT', '/v1/policies/pv', { constraints })).json().version).toBe(2);
    expect((await send(tenant, 'POST', '/v1/policies/pv/deactivate')).statusCode).toBe(200);

    const res = await send(tenant, 'POST', '/v1/tools/validate', { tool_name: 'pv', arguments: { a: 3 } });
    expect(res.json()).toMatchObject({
      decision: 'allow',
      reason: 'Policy for tool "pv" is inactive; allowed without checks',
      metadata: { policy_version: null },
    });
    const id = res.json().metadata.decision_id;
    expect((await send(tenant, 'GET', `/v1/decisions/${id}`)).json().policyVersion).toBeNull();
    const receipt = (await send(tenant, 'GET', `/v1/decisions/${id}/receipt`)).json();
    expect(receipt).toMatchObject({ policy_version: null, policy_hash: null });

    // Active again: version 2 decides and is named everywhere.
    await send(tenant, 'POST', '/v1/policies/pv/activate');
    const active = await send(tenant, 'POST', '/v1/tools/validate', { tool_name: 'pv', arguments: { a: 3 } });
    expect(active.json()).toMatchObject({ decision: 'deny', metadata: { policy_version: 2 } });
    const bound = (
      await send(tenant, 'GET', `/v1/decisions/${active.json().metadata.decision_id}/receipt`)
    ).json();
    expect(bound.policy_version).toBe(2);
    expect(bound.policy_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('says no model judged a call under an inactive llm policy', async () => {
    const tenant = await createTenant(t);
    const policy = {
      toolName: 'mail',
      mode: 'llm',
      llmConfig: { description: 'Emails may only go to recipients at example.com.' },
    };
    expect((await send(tenant, 'POST', '/v1/policies', policy)).statusCode).toBe(201);
    expect((await send(tenant, 'POST', '/v1/policies/mail/deactivate')).statusCode).toBe(200);
    const res = await send(tenant, 'POST', '/v1/tools/validate', { tool_name: 'mail', arguments: {} });
    expect(res.json()).toMatchObject({
      decision: 'allow',
      metadata: { policy_version: null, mode: 'deterministic' },
    });
    const receipt = (
      await send(tenant, 'GET', `/v1/decisions/${res.json().metadata.decision_id}/receipt`)
    ).json();
    expect(receipt).toMatchObject({ mode: 'deterministic', policy_version: null });
    expect(receipt).not.toHaveProperty('judge_provider');
  });
});

describe('context.session_id under session limits', () => {
  const limited = async () => {
    const tenant = await createTenant(t);
    const res = await send(tenant, 'POST', '/v1/policies', {
      toolName: 'search',
      sessionConstraints: { maxCalls: 1 },
    });
    expect(res.statusCode).toBe(201);
    const validate = (context?: object) =>
      send(tenant, 'POST', '/v1/tools/validate', {
        tool_name: 'search',
        arguments: {},
        ...(context ? { context } : {}),
      }).then((r) => r.json());
    return validate;
  };

  it('is never coerced: the number 123 is not the session "123"', async () => {
    const validate = await limited();
    expect((await validate({ session_id: '123' })).decision).toBe('allow');
    const numeric = await validate({ session_id: 123 });
    expect(numeric).toMatchObject({ decision: 'deny' });
    expect(numeric.failed_constraints).toEqual([
      {
        parameter: 'context.session_id',
        constraint_type: 'type',
        expected: 'string',
        actual: 'number',
        message: 'this policy has session limits; context.session_id must be a string (got number)',
      },
    ]);
    for (const session_id of [true, ['123'], { id: '123' }]) {
      const other = await validate({ session_id });
      expect(other.failed_constraints.map((f: { constraint_type: string }) => f.constraint_type)).toEqual([
        'type',
      ]);
    }
    // The string session's one call is still spent; nothing above counted towards it.
    expect((await validate({ session_id: '123' })).failed_constraints[0].constraint_type).toBe('max_calls');
  });

  it('missing, it fails as `required` with expected "present" and actual "absent"', async () => {
    const validate = await limited();
    for (const context of [undefined, {}, { session_id: null }, { session_id: '' }]) {
      const res = await validate(context);
      expect(res.decision).toBe('deny');
      expect(res.failed_constraints).toEqual([
        {
          parameter: 'context.session_id',
          constraint_type: 'required',
          expected: 'present',
          actual: 'absent',
          message: 'this policy has session limits; context.session_id is required',
        },
      ]);
    }
  });
});

describe('a session id too long to be counted', () => {
  // A counter is stored under its session id: PostgreSQL cannot index one of several KiB, so such a
  // call would never be recorded (503 on every retry) where SQLite counted it.
  it('is denied as a `length` failure on both stores, and counts nothing', async () => {
    const tenant = await createTenant(t);
    const policy = { toolName: 'fetch', sessionConstraints: { maxCalls: 5 } };
    expect((await send(tenant, 'POST', '/v1/policies', policy)).statusCode).toBe(201);
    const validate = (session_id: string) =>
      send(tenant, 'POST', '/v1/tools/validate', {
        tool_name: 'fetch',
        arguments: {},
        context: { session_id },
      });
    // Random-looking, so that no store could compress it under an index's row limit.
    let long = '';
    for (let i = 0; long.length < 6000; i++) long += ((i * 2654435761) >>> 0).toString(36);
    const res = await validate(long);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ decision: 'deny' });
    expect(res.json().failed_constraints).toEqual([
      {
        parameter: 'context.session_id',
        constraint_type: 'length',
        expected: { maxLength: 200 },
        actual: long.length,
        message: `this policy has session limits; context.session_id must be at most 200 characters long (got ${long.length})`,
      },
    ]);
    const counters = await t.store.db
      .selectFrom('session_counters')
      .select('session_id')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(counters).toEqual([]);

    // 200 characters (code points: 200 emoji are 400 UTF-16 units) are a session like any other.
    for (const id of ['s'.repeat(200), '😀'.repeat(200)]) {
      expect((await validate(id)).json()).toMatchObject({ decision: 'allow' });
    }
    const over = await validate('😀'.repeat(201));
    expect(over.json().failed_constraints[0]).toMatchObject({ constraint_type: 'length', actual: 201 });
  });

  it('is refused before a person is asked', async () => {
    const tenant = await createTenant(t);
    await setTier(t, tenant, 'team');
    const policy = {
      toolName: 'pay',
      constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      sessionConstraints: { maxCalls: 5 },
    };
    expect((await send(tenant, 'POST', '/v1/policies', policy)).statusCode).toBe(201);
    const res = await send(tenant, 'POST', '/v1/tools/validate', {
      tool_name: 'pay',
      arguments: { amount: 50 },
      context: { session_id: 'x'.repeat(201) },
    });
    expect(res.json()).toMatchObject({ decision: 'deny' });
    expect(res.json()).not.toHaveProperty('approval_id');
    expect(res.json().failed_constraints.map((f: { constraint_type: string }) => f.constraint_type)).toEqual([
      'range',
      'length',
    ]);
  });
});
