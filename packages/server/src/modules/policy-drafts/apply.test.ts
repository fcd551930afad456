import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader } from '../../../test/helpers.js';
import { definitionOf } from '../policies/cache.js';
import { newPolicyRow } from '../policies/model.js';
import { createPolicyRepository, type PolicyRepository } from '../policies/repository.js';
import { applyDraftRules } from './apply.js';

const t = useTestApp();

describe('applyDraftRules under a concurrent policy update', () => {
  it('merges into the newer policy instead of overwriting the update it raced with', async () => {
    const tenant = await createTenant(t);
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', constraints: [{ argumentName: 'to', enum: ['alice'] }] },
    });
    expect(created.statusCode).toBe(201);
    const repo = createPolicyRepository(t.store.db);
    let raced = false;
    // The first write attempt finds that someone else updated the policy after it was read.
    const racing: PolicyRepository = {
      ...repo,
      async replace(org, tool, patch, trx, expectedVersion) {
        if (!raced) {
          raced = true;
          await trx!
            .updateTable('policies')
            .set((eb) => ({
              constraints: JSON.stringify([{ argumentName: 'memo', enabled: true, maxLength: 10 }]),
              version: eb('version', '+', 1),
            }))
            .where('organization_id', '=', org)
            .where('tool_name', '=', tool)
            .execute();
        }
        return repo.replace(org, tool, patch, trx, expectedVersion);
      },
    };
    const rules = [
      {
        id: 'r1',
        action: 'block',
        tools: ['pay'],
        conditions: [{ field: 'arguments.amount', operator: 'greater_than', value: 100 }],
        severity: 'high',
      },
    ];
    const result = await t.store.db
      .transaction()
      .execute((trx) =>
        applyDraftRules(trx, racing, { ...scopeOf(tenant) }, rules, new Date().toISOString()),
      );
    expect(raced).toBe(true);
    expect(result.applied).toEqual([{ toolName: 'pay', version: 3, created: false }]);
    const row = await repo.get(tenant.orgId, 'pay');
    const names = definitionOf(row!).constraints!.map((c) => c.argumentName);
    // The concurrent update (memo) survives and the draft's rule (amount) is added to it.
    expect(names).toEqual(['memo', 'amount']);
  });
});

describe('applyDraftRules under a policy deleted and created again', () => {
  it('merges into the new policy, never over it, though it has the version that was read', async () => {
    const tenant = await createTenant(t);
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', constraints: [{ argumentName: 'to', enum: ['alice'] }] },
    });
    expect(created.statusCode).toBe(201);
    const repo = createPolicyRepository(t.store.db);
    let raced = false;
    // Between the read and the write, the policy is deleted and created again: back at version 1.
    const racing: PolicyRepository = {
      ...repo,
      async replace(org, tool, patch, trx, expected) {
        if (!raced) {
          raced = true;
          await repo.delete(org, tool, trx);
          const def = {
            mode: 'deterministic' as const,
            constraints: [{ argumentName: 'memo', maxLength: 10 }],
          };
          const later = new Date(Date.now() + 60_000).toISOString();
          await repo.insert(newPolicyRow(scopeOf(tenant), tool, def, later), trx);
        }
        return repo.replace(org, tool, patch, trx, expected);
      },
    };
    const rules = [
      {
        id: 'r1',
        action: 'block',
        tools: ['pay'],
        conditions: [{ field: 'arguments.amount', operator: 'greater_than', value: 100 }],
        severity: 'high',
      },
    ];
    const result = await t.store.db
      .transaction()
      .execute((trx) => applyDraftRules(trx, racing, scopeOf(tenant), rules, new Date().toISOString()));
    expect(raced).toBe(true);
    expect(result.applied).toEqual([{ toolName: 'pay', version: 2, created: false }]);
    const row = await repo.get(tenant.orgId, 'pay');
    // The new policy's constraint (memo) stays; the deleted one's (to) does not come back.
    expect(definitionOf(row!).constraints!.map((c) => c.argumentName)).toEqual(['memo', 'amount']);
  });
});

function scopeOf(tenant: { orgId: string; projectId: string }) {
  return {
    organizationId: tenant.orgId,
    projectId: tenant.projectId,
    principal: { kind: 'user' as const, userId: 'reviewer' },
  };
}
