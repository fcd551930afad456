import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { hashJson } from '../../ledger/canonical.js';
import { createPolicyRepository } from './repository.js';

let a: Tenant;
let b: Tenant;
const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
});

const call = (tenant: Tenant, method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: object) =>
  t.inject({ method, url, headers: keyHeader(tenant.apiKey), ...(payload ? { payload } : {}) });

const limit = (maximum: number) => ({ constraints: [{ argumentName: 'amount', maximum }] });

describe('GET /v1/policies/:toolName/versions', () => {
  it('keeps every version; each policyHash is the hash of its definition and what receipts bind', async () => {
    expect((await call(a, 'POST', '/v1/policies', { toolName: 'pay', ...limit(10) })).statusCode).toBe(201);
    await call(a, 'PUT', '/v1/policies/pay', limit(20));
    const v = await call(a, 'POST', '/v1/tools/validate', { tool_name: 'pay', arguments: { amount: 5 } });
    expect(v.json().metadata.policy_version).toBe(2);
    await call(a, 'PUT', '/v1/policies/pay', limit(30));

    const list = (await call(a, 'GET', '/v1/policies/pay/versions')).json().data;
    expect(list.map((x: { version: number }) => x.version)).toEqual([3, 2, 1]);
    for (const version of list) expect(version.policyHash).toBe(hashJson(version.definition));
    expect(list[1].definition.constraints[0]).toMatchObject({ argumentName: 'amount', maximum: 20 });

    const receipt = (await call(a, 'GET', `/v1/decisions/${v.json().metadata.decision_id}/receipt`)).json();
    const v2 = (await call(a, 'GET', '/v1/policies/pay/versions/2')).json();
    expect(receipt).toMatchObject({ policy_version: 2, policy_hash: v2.policyHash });
  });

  it('lists versions newest first when racing writes were stamped out of order', async () => {
    await call(a, 'POST', '/v1/policies', { toolName: 'race', ...limit(1) });
    const repo = createPolicyRepository(t.store.db);
    const row = (await repo.get(a.orgId, 'race'))!;
    const write = (at: string) =>
      repo.replace(a.orgId, 'race', { ...row, constraints: JSON.stringify([]), updated_at: at });
    // Two writes that began in one order and reached the store in the other.
    await write('2999-01-01T00:00:02.000Z');
    await write('2999-01-01T00:00:01.000Z');
    await repo.setActive(a.orgId, 'race', false, '2999-01-01T00:00:00.500Z', row.project_id);
    const list = (await call(a, 'GET', '/v1/policies/race/versions')).json().data;
    expect(list.map((x: { version: number }) => x.version)).toEqual([3, 2, 1]);
    expect(list[0].createdAt >= list[1].createdAt).toBe(true);
    expect((await call(a, 'GET', '/v1/policies/race')).json().updatedAt).toBe('2999-01-01T00:00:02.000Z');
  });

  it('a policy deleted and created again keeps both incarnations, told apart by policy_hash', async () => {
    await call(a, 'POST', '/v1/policies', { toolName: 'wire', ...limit(1) });
    await call(a, 'DELETE', '/v1/policies/wire');
    await call(a, 'POST', '/v1/policies', { toolName: 'wire', ...limit(2) });
    const both = (await call(a, 'GET', '/v1/policies/wire/versions')).json().data;
    expect(both).toHaveLength(2);
    expect(both.map((x: { version: number }) => x.version)).toEqual([1, 1]);
    const newest = (await call(a, 'GET', '/v1/policies/wire/versions/1')).json();
    expect(newest.definition.constraints[0].maximum).toBe(2);
    const older = (
      await call(a, 'GET', `/v1/policies/wire/versions/1?policy_hash=${both[1].policyHash}`)
    ).json();
    expect(older.definition.constraints[0].maximum).toBe(1);
  });

  it('answers 404 for unknown tools and versions, 400 for a bad version, and nothing across tenants', async () => {
    expectError(await call(a, 'GET', '/v1/policies/nope/versions'), 404, 'not_found');
    expectError(await call(a, 'GET', '/v1/policies/pay/versions/9'), 404, 'not_found');
    const zero = await call(a, 'GET', '/v1/policies/pay/versions/0');
    expectError(zero, 400, 'validation_failed');
    expect(zero.json().error.message).toBe('params/version must be an integer from 1 to 2147483647');
    expectError(await call(a, 'GET', '/v1/policies/pay/versions/x'), 400, 'validation_failed');
    expectError(
      await call(a, 'GET', `/v1/policies/pay/versions/1?policy_hash=sha256:${'0'.repeat(64)}`),
      404,
      'not_found',
    );
    expectError(await call(b, 'GET', '/v1/policies/pay/versions'), 404, 'not_found');
    expectError(await call(b, 'GET', '/v1/policies/pay/versions/1'), 404, 'not_found');
  });
});
