import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader } from '../../../test/helpers.js';
import type { Db } from '../../storage/db.js';
import { definitionOf } from '../policies/cache.js';
import { newPolicyRow } from '../policies/model.js';
import { createPolicyRepository, type PolicyRepository } from '../policies/repository.js';
import { applyDraftRules } from './apply.js';

const t = useTestApp();

/** A tenant whose tool `pay` has one constraint, on `to`. */
async function tenantWithPayPolicy() {
  const tenant = await createTenant(t);
  const created = await t.inject({
    method: 'POST',
    url: '/v1/policies',
    headers: keyHeader(tenant.apiKey),
    payload: { toolName: 'pay', constraints: [{ argumentName: 'to', enum: ['alice'] }] },
  });
  expect(created.statusCode).toBe(201);
  return tenant;
}

/** The policy repository, with `race` run (once) inside the first write, after the merge was read. */
function racingRepository(race: (org: string, tool: string, trx: Db) => Promise<void>) {
  const repo = createPolicyRepository(t.store.db);
  const state = { raced: false };
  const racing: PolicyRepository = {
    ...repo,
    async replace(org, tool, patch, trx, expected) {
      if (!state.raced) {
        state.raced = true;
        await race(org, tool, trx!);
      }
      return repo.replace(org, tool, patch, trx, expected);
    },
  };
  return { repo, racing, state };
}

/** One draft rule for `pay`: block amounts over 100. */
const BLOCK_OVER_100 = [
  {
    id: 'r1',
    action: 'block',
    tools: ['pay'],
    conditions: [{ field: 'arguments.amount', operator: 'greater_than', value: 100 }],
    severity: 'high',
  },
];

const apply = (racing: PolicyRepository, tenant: { orgId: string; projectId: string }) =>
  t.store.db
    .transaction()
    .execute((trx) =>
      applyDraftRules(trx, racing, scopeOf(tenant), BLOCK_OVER_100, new Date().toISOString()),
    );

describe('applyDraftRules under a concurrent policy update', () => {
  it('merges into the newer policy instead of overwriting the update it raced with', async () => {
    const tenant = await tenantWithPayPolicy();
    // The first write attempt finds that someone else updated the policy after it was read.
    const { repo, racing, state } = racingRepository(async (org, tool, trx) => {
      await trx
        .updateTable('policies')
        .set((eb) => ({
          constraints: JSON.stringify([{ argumentName: 'memo', enabled: true, maxLength: 10 }]),
          version: eb('version', '+', 1),
        }))
        .where('organization_id', '=', org)
        .where('tool_name', '=', tool)
        .execute();
    });
    const result = await apply(racing, tenant);
    expect(state.raced).toBe(true);
    expect(result.applied).toEqual([{ toolName: 'pay', version: 3, created: false }]);
    const row = await repo.get(tenant.orgId, 'pay');
    const names = definitionOf(row!).constraints!.map((c) => c.argumentName);
    // The concurrent update (memo) survives and the draft's rule (amount) is added to it.
    expect(names).toEqual(['memo', 'amount']);
  });
});

describe('applyDraftRules under a policy deleted and created again', () => {
  it('merges into the new policy, never over it, though it has the version that was read', async () => {
    const tenant = await tenantWithPayPolicy();
    // Between the read and the write, the policy is deleted and created again: back at version 1.
    const { repo, racing, state } = racingRepository(async (org, tool, trx) => {
      await repo.delete(org, tool, trx);
      const def = { mode: 'deterministic' as const, constraints: [{ argumentName: 'memo', maxLength: 10 }] };
      const later = new Date(Date.now() + 60_000).toISOString();
      await repo.insert(newPolicyRow(scopeOf(tenant), tool, def, later), trx);
    });
    const result = await apply(racing, tenant);
    expect(state.raced).toBe(true);
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
