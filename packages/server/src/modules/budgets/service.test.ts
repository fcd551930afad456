import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, type Tenant } from '../../../test/helpers.js';
import { AppError } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import { createSpendReceipts, type SpendReceipts } from './receipts.js';
import { createEconomicConfigRepository, createSpendLedger, type SpendLedger } from './repository.js';
import { createBudgetService } from './service.js';

let tenant: Tenant;
let scope: OrgScope;

const t = useTestApp();
beforeAll(async () => {
  tenant = await createTenant(t);
  scope = {
    organizationId: tenant.orgId,
    projectId: null,
    principal: { kind: 'user', userId: tenant.userId },
  };
});

const silent = { error: () => {} };

function service(receipts: SpendReceipts, ledger: SpendLedger = createSpendLedger(t.store)) {
  return createBudgetService({
    ledger,
    configs: createEconomicConfigRepository(t.store.db),
    receipts,
    events: t.ctx.events,
    clock: t.ctx.clock,
    log: silent,
    tierOf: async () => 'team',
  });
}

const input = (actionId: string) => ({
  actionId,
  sessionId: 's',
  agentId: 'a',
  toolName: 'buy',
  category: 'c',
  payer: null,
  quoteMicros: 5_000_000,
  maxAcceptableMicros: 5_000_000,
  budgetScopes: ['session' as const],
  metadata: {},
  mode: 'live' as const,
  approvalId: null,
});

describe('budget service failures', () => {
  it('answers 503 when a receipt cannot be written, and the same request again completes it', async () => {
    const real = createSpendReceipts(t.ctx.writer);
    let fail = true;
    const flaky: SpendReceipts = {
      write: (r) => (fail ? Promise.reject(new Error('disk full')) : real.write(r)),
    };
    const svc = service(flaky);
    await svc.putConfig(scope, { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 });
    const err = await svc.authorize(scope, input('x-1')).catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('service_unavailable');
    fail = false;
    const answer = await svc.authorize(scope, input('x-1'));
    expect(answer).toMatchObject({ decision: 'allow', budget: { session: { reservedUsd: 5 } } });
    await t.ctx.writer.drain();
    const row = await t.store.db
      .selectFrom('spend_actions')
      .select('authorize_receipt_id')
      .where('organization_id', '=', tenant.orgId)
      .where('action_id', '=', 'x-1')
      .executeTakeFirstOrThrow();
    expect(row.authorize_receipt_id).not.toBeNull();

    fail = true;
    const commit = {
      actionId: 'x-1',
      sessionId: 's',
      agentId: 'a',
      toolName: 'buy',
      category: 'c',
      payer: null,
      quoteMicros: 5_000_000,
      actualMicros: 4_000_000,
      approvalId: null,
    };
    expect(((await svc.commit(scope, commit).catch((e) => e)) as AppError).code).toBe('service_unavailable');
    fail = false;
    // The commit was recorded once; the retry returns it and writes the missing receipt.
    const committed = await svc.commit(scope, commit);
    expect(committed.budget.session).toMatchObject({ spentUsd: 4, reservedUsd: 0 });
    const receipts = await t.store.db
      .selectFrom('receipts')
      .select('payload')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(receipts.map((r) => JSON.parse(r.payload).decision)).toEqual(['allow', 'economic_committed']);
  });

  it('chains one receipt per authorization and commit when the same request is sent several times at once', async () => {
    const real = createSpendReceipts(t.ctx.writer);
    let writes = 0;
    // Slow receipts: every copy of the request reaches the receipt while the first is still writing it.
    const slow: SpendReceipts = {
      write: async (r) => {
        writes++;
        await new Promise((resolve) => setTimeout(resolve, 50));
        return real.write(r);
      },
    };
    const other = await createTenant(t);
    const own = { ...scope, organizationId: other.orgId };
    const svc = service(slow);
    await svc.putConfig(own, { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 });
    const answers = await Promise.all(Array.from({ length: 8 }, () => svc.authorize(own, input('twice'))));
    expect(new Set(answers.map((a) => JSON.stringify(a))).size).toBe(1);
    const commit = {
      actionId: 'twice',
      sessionId: 's',
      agentId: 'a',
      toolName: 'buy',
      category: 'c',
      payer: null,
      quoteMicros: 5_000_000,
      actualMicros: 5_000_000,
      approvalId: null,
    };
    await Promise.all(Array.from({ length: 8 }, () => svc.commit(own, commit)));
    await t.ctx.writer.drain();
    const chained = await t.store.db
      .selectFrom('receipts')
      .select('payload')
      .where('organization_id', '=', other.orgId)
      .execute();
    expect(chained.map((r) => JSON.parse(r.payload).decision)).toEqual(['allow', 'economic_committed']);
    expect(writes).toBe(2);
  });

  it('takes over the claim of a writer that died, finding the receipt it chained', async () => {
    const other = await createTenant(t);
    const own = { ...scope, organizationId: other.orgId };
    const svc = service(createSpendReceipts(t.ctx.writer));
    await svc.putConfig(own, { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 });
    await svc.authorize(own, input('orphan'));
    await t.ctx.writer.drain();
    const where = { org: other.orgId, action: 'orphan' };
    const stored = await t.store.db
      .selectFrom('spend_actions')
      .select('authorize_receipt_id')
      .where('organization_id', '=', where.org)
      .where('action_id', '=', where.action)
      .executeTakeFirstOrThrow();
    // As a writer leaves it that chained the receipt and died before storing its id, long ago.
    const longAgo = new Date(t.ctx.clock.now().getTime() - 120_000).toISOString();
    await t.store.db
      .updateTable('spend_actions')
      .set({ authorize_receipt_id: null, authorize_receipt_claimed_at: longAgo })
      .where('organization_id', '=', where.org)
      .where('action_id', '=', where.action)
      .execute();
    await svc.authorize(own, input('orphan'));
    await t.ctx.writer.drain();
    const after = await t.store.db
      .selectFrom('spend_actions')
      .select(['authorize_receipt_id', 'authorize_receipt_claimed_at'])
      .where('organization_id', '=', where.org)
      .where('action_id', '=', where.action)
      .executeTakeFirstOrThrow();
    expect(after).toEqual({
      authorize_receipt_id: stored.authorize_receipt_id,
      authorize_receipt_claimed_at: null,
    });
    const chained = await t.store.db
      .selectFrom('receipts')
      .select('receipt_id')
      .where('organization_id', '=', other.orgId)
      .execute();
    expect(chained).toHaveLength(1);
  });

  it('claims and stores a receipt only for the entry the action still has', async () => {
    const other = await createTenant(t);
    const own = { ...scope, organizationId: other.orgId };
    const ledger = createSpendLedger(t.store);
    let fail = true;
    const real = createSpendReceipts(t.ctx.writer);
    const svc = service(
      { write: (r) => (fail ? Promise.reject(new Error('disk full')) : real.write(r)) },
      ledger,
    );
    await svc.putConfig(own, { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 });
    await svc.authorize(own, input('moved')).catch(() => {});
    const first = await ledger.receiptState(other.orgId, 'moved', 'authorize');
    // The action is decided again (a new authorization entry) while a request still holds the first.
    await t.store.db
      .updateTable('spend_actions')
      .set({ authorization_id: 'a-newer-entry' })
      .where('organization_id', '=', other.orgId)
      .where('action_id', '=', 'moved')
      .execute();
    const at = t.ctx.clock.now().toISOString();
    expect(await ledger.claimReceipt(other.orgId, 'moved', 'authorize', first!.entryId!, at, null)).toBe(
      false,
    );
    await ledger.setReceipt(other.orgId, 'moved', 'authorize', first!.entryId!, at, 'r-of-the-first');
    expect(await ledger.receiptState(other.orgId, 'moved', 'authorize')).toEqual({
      entryId: 'a-newer-entry',
      receiptId: null,
      claimedAt: null,
    });
    fail = false;
  });

  it('reports healthy: false when the ledger cannot be read', async () => {
    const broken: SpendLedger = {
      ...createSpendLedger(t.store),
      locked: () => Promise.reject(new Error('connection refused')),
    };
    const status = await service(createSpendReceipts(t.ctx.writer), broken).status(scope, {
      sessionId: 's',
      agentId: 'a',
    });
    expect(status).toEqual({
      enabled: true,
      authority: 'organization',
      healthy: false,
      pendingApprovals: [],
      budget: null,
    });
  });
});
