import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, receiptsOf } from '../../../test/approvals.js';
import {
  asUser,
  createTenant,
  createTestApp,
  freshDatabase,
  gate,
  TEST_PG_URL,
  type Tenant,
  type TestApp,
  type TestDatabase,
} from '../../../test/helpers.js';
import { hashJson } from '../../ledger/canonical.js';
import type { OrgScope } from '../../lib/scope.js';
import { receiptSweep } from '../../lib/sweep.js';
import { createSpendReceipts, type SpendReceipts } from './receipts.js';
import {
  createEconomicConfigRepository,
  createSpendLedger,
  type LedgerTx,
  type SpendLedger,
} from './repository.js';
import { createBudgetService } from './service.js';

const clock = new ManualClock();
let db: TestDatabase;
let t: TestApp;

beforeAll(async () => {
  db = await freshDatabase();
  t = await createTestApp({}, { database: db, clock });
});
afterAll(async () => {
  await t.close();
  await db.drop();
});

const silent = { error: () => {} };

function service(
  receipts: SpendReceipts,
  ledger: SpendLedger = createSpendLedger(t.store),
  log: { error(obj: object, msg: string): void } = silent,
) {
  return createBudgetService({
    ledger,
    configs: createEconomicConfigRepository(t.store.db),
    receipts,
    events: t.ctx.events,
    clock,
    log,
    tierOf: async () => 'team',
  });
}

/** The decision log's receipts, failing while `fail.on` is true. */
function flaky(fail: { on: boolean }): SpendReceipts {
  const real = createSpendReceipts(t.ctx.writer);
  return { write: (r) => (fail.on ? Promise.reject(new Error('disk full')) : real.write(r)) };
}

const CONFIG = { approvedPayers: ['corp'], defaultPayer: 'corp', sessionLimitUsd: 100 };

/** A new organization with the economic configuration `config`, and a person's scope in it. */
async function organization(config: object = CONFIG): Promise<{ tenant: Tenant; scope: OrgScope }> {
  const tenant = await createTenant(t);
  const scope: OrgScope = {
    organizationId: tenant.orgId,
    projectId: null,
    principal: { kind: 'user', userId: tenant.userId },
  };
  await service(flaky({ on: false })).putConfig(scope, config as never);
  return { tenant, scope };
}

const input = (actionId: string, quoteMicros = 5_000_000) => ({
  actionId,
  sessionId: 's',
  agentId: 'a',
  toolName: 'buy',
  category: 'c',
  payer: null,
  quoteMicros,
  maxAcceptableMicros: quoteMicros,
  budgetScopes: ['session' as const],
  metadata: {},
  mode: 'live' as const,
  approvalId: null,
});

const commitOf = (actionId: string, over: object = {}) => ({
  actionId,
  sessionId: 's',
  agentId: 'a',
  toolName: 'buy',
  category: 'c',
  payer: null,
  quoteMicros: 5_000_000,
  actualMicros: 4_000_000,
  approvalId: null,
  ...over,
});

const actionRow = (orgId: string, actionId: string) =>
  t.store.db
    .selectFrom('spend_actions')
    .selectAll()
    .where('organization_id', '=', orgId)
    .where('action_id', '=', actionId)
    .executeTakeFirstOrThrow();

/** The economic receipts chained for one ledger entry, parsed (an approval's resolution names it too). */
async function receiptsFor(orgId: string, entryId: string): Promise<Record<string, unknown>[]> {
  await t.ctx.writer.drain();
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', orgId)
    .where('decision_id', '=', entryId)
    .execute();
  return rows.map((r) => JSON.parse(r.payload)).filter((r) => r.source === 'economic');
}

async function expectChainVerifies(orgId: string, length: number) {
  await t.ctx.writer.drain();
  const chain = await receiptsOf(t, orgId);
  expect(chain).toHaveLength(length);
  expect((await verifyReceipts(chain)).ok).toBe(true);
}

const authorizationEntries = async (orgId: string, actionId: string) =>
  (await createSpendLedger(t.store).entries(orgId)).filter(
    (e) => e.action_id === actionId && e.kind === 'authorization',
  );

describe('the economic receipt sweep', () => {
  it('chains the receipt of an authorization and of a commit whose write failed and was not sent again', async () => {
    const { tenant, scope } = await organization();
    const fail = { on: true };
    const svc = service(flaky(fail));
    expect(await svc.authorize(scope, input('a-1')).catch((e) => e.code)).toBe('service_unavailable');
    const owed = await actionRow(tenant.orgId, 'a-1');
    expect(owed).toMatchObject({ authorize_receipt_id: null, authorize_receipt_claimed_at: null });

    // A pass whose write fails logs it, gives the claim back and does not throw.
    const logged: string[] = [];
    const failing = service(flaky(fail), createSpendLedger(t.store), {
      error: (_o, msg) => logged.push(msg),
    });
    await expect(failing.repairReceipts()).resolves.toBe(0);
    expect(logged).toEqual([expect.stringContaining('receipt repair failed')]);
    expect(await actionRow(tenant.orgId, 'a-1')).toMatchObject({
      authorize_receipt_id: null,
      authorize_receipt_claimed_at: null,
    });

    fail.on = false;
    expect(await svc.repairReceipts()).toBeGreaterThanOrEqual(1);
    const repaired = await actionRow(tenant.orgId, 'a-1');
    const [receipt, ...more] = await receiptsFor(tenant.orgId, owed.authorization_id);
    expect(more).toEqual([]);
    expect(repaired.authorize_receipt_id).toBe(receipt!.receipt_id);
    expect(repaired.authorize_receipt_claimed_at).toBeNull();
    const effective = (await svc.config(scope)).effective;
    expect(effective).not.toBeNull();
    expect(receipt).toMatchObject({
      decision: 'allow',
      source: 'economic',
      action_id: 'a-1',
      tool_name: 'buy',
      amount_micros: 5_000_000,
      payer: 'corp',
      timestamp: owed.decided_at,
      argument_hash: hashJson(JSON.parse(owed.request)),
    });
    expect(String(receipt!.reason)).toMatch(/^economic_authorized: /);

    // The commit names its payer; the sweep binds the request as it was sent.
    fail.on = true;
    const commit = commitOf('a-1', { payer: 'corp' });
    expect(await svc.commit(scope, commit).catch((e) => e.code)).toBe('service_unavailable');
    const committed = await actionRow(tenant.orgId, 'a-1');
    expect(committed).toMatchObject({ commit_receipt_id: null, commit_receipt_claimed_at: null });
    fail.on = false;
    await svc.repairReceipts();
    const [commitReceipt, ...again] = await receiptsFor(tenant.orgId, committed.commit_id!);
    expect(again).toEqual([]);
    expect((await actionRow(tenant.orgId, 'a-1')).commit_receipt_id).toBe(commitReceipt!.receipt_id);
    expect(commitReceipt).toMatchObject({
      decision: 'economic_committed',
      amount_micros: 4_000_000,
      payer: 'corp',
      timestamp: JSON.parse(committed.commit_answer!).budget.asOf,
      policy_hash: receipt!.policy_hash,
      argument_hash: hashJson({
        actionId: 'a-1',
        sessionId: 's',
        agentId: 'a',
        toolName: 'buy',
        category: 'c',
        payer: 'corp',
        quotedSpendMicros: 5_000_000,
        actualSpendMicros: 4_000_000,
        approvalId: null,
      }),
    });
    // The client sending its requests again now writes nothing more.
    await svc.authorize(scope, input('a-1'));
    await svc.commit(scope, commit);
    await expectChainVerifies(tenant.orgId, 2);
  });

  it('takes over a stale claim once, finding the receipt its writer chained, and leaves a fresh claim alone', async () => {
    const { tenant, scope } = await organization();
    const svc = service(flaky({ on: false }));
    await svc.authorize(scope, input('chained'));
    const written = await actionRow(tenant.orgId, 'chained');
    expect(written.authorize_receipt_id).not.toBeNull();
    const set = (actionId: string, values: Record<string, string | null>) =>
      t.store.db
        .updateTable('spend_actions')
        .set(values)
        .where('organization_id', '=', tenant.orgId)
        .where('action_id', '=', actionId)
        .execute();
    // A writer chained the receipt and died, long ago, before storing its id.
    const longAgo = new Date(clock.now().getTime() - 120_000).toISOString();
    await set('chained', { authorize_receipt_id: null, authorize_receipt_claimed_at: longAgo });

    // A writer claimed another action's receipt just now and is still writing it.
    await service(flaky({ on: true }))
      .authorize(scope, input('busy'))
      .catch(() => {});
    await set('busy', { authorize_receipt_claimed_at: clock.now().toISOString() });

    await svc.repairReceipts();
    expect(await actionRow(tenant.orgId, 'chained')).toMatchObject({
      authorize_receipt_id: written.authorize_receipt_id,
      authorize_receipt_claimed_at: null,
    });
    expect(await receiptsFor(tenant.orgId, written.authorization_id)).toHaveLength(1);
    const busy = await actionRow(tenant.orgId, 'busy');
    expect(busy.authorize_receipt_id).toBeNull();
    expect(await receiptsFor(tenant.orgId, busy.authorization_id)).toHaveLength(0);

    // A minute later its writer is taken for dead: the sweep takes the claim over, once.
    clock.advance(61);
    await svc.repairReceipts();
    await svc.repairReceipts();
    const [receipt, ...more] = await receiptsFor(tenant.orgId, busy.authorization_id);
    expect(more).toEqual([]);
    expect(await actionRow(tenant.orgId, 'busy')).toMatchObject({
      authorize_receipt_id: receipt!.receipt_id,
      authorize_receipt_claimed_at: null,
    });
    await expectChainVerifies(tenant.orgId, 2);
  });

  it('chains one receipt per slot when two processes sweep at once', async () => {
    const { tenant, scope } = await organization();
    const fail = { on: true };
    const svc = service(flaky(fail));
    for (const id of ['r-1', 'r-2', 'r-3']) await svc.authorize(scope, input(id)).catch(() => {});
    fail.on = false;
    await svc.authorize(scope, input('r-4'));
    fail.on = true;
    await svc.commit(scope, commitOf('r-4')).catch(() => {});
    // A writer died holding r-3's claim without chaining its receipt.
    await t.store.db
      .updateTable('spend_actions')
      .set({ authorize_receipt_claimed_at: new Date(clock.now().getTime() - 120_000).toISOString() })
      .where('organization_id', '=', tenant.orgId)
      .where('action_id', '=', 'r-3')
      .execute();
    fail.on = false;

    let writes = 0;
    const real = createSpendReceipts(t.ctx.writer);
    // Slow writes: each process reaches every slot while the other may be writing it.
    const slow: SpendReceipts = {
      write: async (r) => {
        if (r.organizationId === tenant.orgId) writes++;
        await new Promise((resolve) => setTimeout(resolve, 30));
        return real.write(r);
      },
    };
    const instances = [service(slow), service(slow)];
    await Promise.all(instances.map((s) => s.repairReceipts()));
    await Promise.all(instances.map((s) => s.repairReceipts()));
    expect(writes).toBe(4);
    for (const id of ['r-1', 'r-2', 'r-3', 'r-4']) {
      const row = await actionRow(tenant.orgId, id);
      const entries = [row.authorization_id, ...(row.commit_id ? [row.commit_id] : [])];
      for (const entry of entries) expect(await receiptsFor(tenant.orgId, entry)).toHaveLength(1);
      expect(row.authorize_receipt_id).not.toBeNull();
    }
    expect((await actionRow(tenant.orgId, 'r-4')).commit_receipt_id).not.toBeNull();
    await expectChainVerifies(tenant.orgId, 5);
  });

  it('reads one page per pass, oldest decisions first', async () => {
    const { tenant, scope } = await organization();
    const svc = service(flaky({ on: true }));
    await svc.authorize(scope, input('older')).catch(() => {});
    clock.advance(1);
    await svc.authorize(scope, input('newer')).catch(() => {});
    const sweeper = service(flaky({ on: false }));
    await sweeper.repairReceipts({ limit: 1 });
    expect((await actionRow(tenant.orgId, 'older')).authorize_receipt_id).not.toBeNull();
    expect((await actionRow(tenant.orgId, 'newer')).authorize_receipt_id).toBeNull();
    await sweeper.repairReceipts({ limit: 1 });
    expect((await actionRow(tenant.orgId, 'newer')).authorize_receipt_id).not.toBeNull();
    await expectChainVerifies(tenant.orgId, 2);
  });

  it('takes owed authorizations and commits in one order of decisions, an action owing both once', async () => {
    const { tenant, scope } = await organization();
    const fail = { on: false };
    const svc = service(flaky(fail));
    await svc.authorize(scope, input('commit-owed'));
    fail.on = true;
    await svc.commit(scope, commitOf('commit-owed')).catch(() => {});
    clock.advance(1);
    await svc.authorize(scope, input('both-owed')).catch(() => {});
    await svc.commit(scope, commitOf('both-owed')).catch(() => {});
    clock.advance(1);
    await svc.authorize(scope, input('authorization-owed')).catch(() => {});
    fail.on = false;
    const owes = async (id: string) => {
      const row = await actionRow(tenant.orgId, id);
      return [row.authorize_receipt_id === null, row.commit_id !== null && row.commit_receipt_id === null];
    };
    expect(await owes('commit-owed')).toEqual([false, true]);
    expect(await owes('both-owed')).toEqual([true, true]);
    // One action per place in the page: the older commit first, then both slots of the next action.
    await svc.repairReceipts({ limit: 1 });
    expect(await owes('commit-owed')).toEqual([false, false]);
    expect(await owes('both-owed')).toEqual([true, true]);
    await svc.repairReceipts({ limit: 1 });
    expect(await owes('both-owed')).toEqual([false, false]);
    expect(await owes('authorization-owed')).toEqual([true, false]);
    await svc.repairReceipts({ limit: 1 });
    expect(await owes('authorization-owed')).toEqual([false, false]);
    await expectChainVerifies(tenant.orgId, 5);
  });

  it('moves past actions whose receipt it cannot make, and tries them again a while later', async () => {
    const { tenant, scope } = await organization();
    const fail = { on: false };
    const svc = service(flaky(fail));
    const setCommitHash = (actionId: string, hash: string) =>
      t.store.db
        .updateTable('spend_actions')
        .set({ commit_hash: hash })
        .where('organization_id', '=', tenant.orgId)
        .where('action_id', '=', actionId)
        .execute();
    const hashes = new Map<string, string>();
    for (const id of ['broken-1', 'broken-2']) {
      await svc.authorize(scope, input(id));
      fail.on = true;
      await svc.commit(scope, commitOf(id)).catch(() => {});
      fail.on = false;
      // Its commit request cannot be rebuilt from what the commit stored.
      hashes.set(id, (await actionRow(tenant.orgId, id)).commit_hash!);
      await setCommitHash(id, 'not-the-request');
      clock.advance(1);
    }
    fail.on = true;
    await svc.authorize(scope, input('behind')).catch(() => {});
    const logged: string[] = [];
    const sweeper = service(flaky({ on: false }), createSpendLedger(t.store), {
      error: (_o, msg) => logged.push(msg),
    });
    const cannot = 'spend commit receipt owed, but its request could not be rebuilt from the stored commit';
    const behind = async () => (await actionRow(tenant.orgId, 'behind')).authorize_receipt_id;

    // One action per pass: each broken one is tried once, then the page reaches the newer action.
    await sweeper.repairReceipts({ limit: 1 });
    await sweeper.repairReceipts({ limit: 1 });
    expect(logged).toEqual([cannot, cannot]);
    expect(await behind()).toBeNull();
    expect(await sweeper.repairReceipts({ limit: 1 })).toBe(1);
    expect(await behind()).not.toBeNull();
    expect(await sweeper.repairReceipts({ limit: 1 })).toBe(0);
    expect(logged).toHaveLength(2);

    // Ten minutes later they are tried again (and chained, once they can be).
    for (const [id, hash] of hashes) await setCommitHash(id, hash);
    clock.advance(10 * 60);
    expect(await sweeper.repairReceipts({ limit: 1 })).toBe(1);
    expect(await sweeper.repairReceipts({ limit: 1 })).toBe(1);
    expect(logged).toHaveLength(2);
    for (const id of hashes.keys()) {
      const row = await actionRow(tenant.orgId, id);
      expect(await receiptsFor(tenant.orgId, row.commit_id!)).toHaveLength(1);
      expect(row.commit_receipt_id).not.toBeNull();
    }
    await expectChainVerifies(tenant.orgId, 5);
  });

  it.skipIf(!TEST_PG_URL)(
    "keeps an authorization's receipt stored while its commit runs (another process stores it meanwhile)",
    async () => {
      const { tenant, scope } = await organization();
      const fail = { on: true };
      const svc = service(flaky(fail));
      await svc.authorize(scope, input('c-1')).catch(() => {});
      fail.on = false;
      const ledger = createSpendLedger(t.store);
      const other = service(flaky({ on: false }));
      // The commit reads the action; before it writes, another process's sweep stores the receipt.
      const interleaved: SpendLedger = {
        ...ledger,
        locked: (org, now, fn) =>
          ledger.locked(org, now, async (tx: LedgerTx) => {
            const read = tx.action.bind(tx);
            tx.action = async (id) => {
              const row = await read(id);
              await other.repairReceipts();
              return row;
            };
            return fn(tx as never);
          }) as never,
      };
      await service(flaky({ on: false }), interleaved).commit(scope, commitOf('c-1'));
      const row = await actionRow(tenant.orgId, 'c-1');
      const receipts = await receiptsFor(tenant.orgId, row.authorization_id);
      expect(receipts).toHaveLength(1);
      expect(row.authorize_receipt_id).toBe(receipts[0]!.receipt_id);
      await other.repairReceipts();
      expect(await receiptsFor(tenant.orgId, row.authorization_id)).toHaveLength(1);
      await expectChainVerifies(tenant.orgId, 2);
    },
  );
});

describe('an action decided again', () => {
  it("first chains the owed receipt of the authorization it replaces, binding that authorization's own decision", async () => {
    const { tenant, scope } = await organization({
      ...CONFIG,
      sessionLimitUsd: 10,
      approvalWindowSeconds: 60,
    });
    const fail = { on: true };
    const svc = service(flaky(fail));
    expect(await svc.authorize(scope, input('first', 8_000_000)).catch((e) => e.code)).toBe(
      'service_unavailable',
    );
    const earlier = await actionRow(tenant.orgId, 'first');
    // The reservation lapses; another action takes most of the budget meanwhile.
    clock.advance(61);
    fail.on = false;
    expect((await svc.authorize(scope, input('other', 5_000_000))).decision).toBe('allow');

    // While the earlier receipt cannot be written, the action is not decided again.
    fail.on = true;
    const refused = await svc.authorize(scope, input('first', 8_000_000)).catch((e) => e);
    expect(refused.code).toBe('service_unavailable');
    expect(refused.message).toContain('earlier authorization');
    expect((await actionRow(tenant.orgId, 'first')).authorization_id).toBe(earlier.authorization_id);
    expect(await authorizationEntries(tenant.orgId, 'first')).toHaveLength(1);

    fail.on = false;
    const answer = await svc.authorize(scope, input('first', 8_000_000));
    expect(answer).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
    const entries = await authorizationEntries(tenant.orgId, 'first');
    expect(entries.map((e) => e.id)).toEqual([earlier.authorization_id, expect.any(String)]);
    const [old, ...dupes] = await receiptsFor(tenant.orgId, earlier.authorization_id);
    expect(dupes).toEqual([]);
    expect(old).toMatchObject({
      decision: 'allow',
      amount_micros: 8_000_000,
      timestamp: earlier.decided_at,
      argument_hash: hashJson(JSON.parse(earlier.request)),
    });
    expect(String(old!.reason)).toMatch(/^economic_authorized: /);
    const current = await actionRow(tenant.orgId, 'first');
    const [now, ...more] = await receiptsFor(tenant.orgId, current.authorization_id);
    expect(more).toEqual([]);
    expect(now).toMatchObject({ decision: 'deny' });
    expect(String(now!.reason)).toMatch(/^session_budget_exceeded: /);
    expect(Number(now!.sequence)).toBeGreaterThan(Number(old!.sequence));
    expect(current.authorize_receipt_id).toBe(now!.receipt_id);
    await expectChainVerifies(tenant.orgId, 3);
  });

  it("tries the earlier authorization's owed receipt at most three times before refusing", async () => {
    const { tenant, scope } = await organization({ ...CONFIG, approvalWindowSeconds: 60 });
    await service(flaky({ on: true }))
      .authorize(scope, input('owed'))
      .catch(() => {});
    clock.advance(61);
    // Each try finds the slot taken and then its entry replaced, so it writes nothing and returns;
    // the action still owes the receipt when it is read again.
    let tries = 0;
    const ledger = createSpendLedger(t.store);
    const elsewhere: SpendLedger = {
      ...ledger,
      claimReceipt: async () => {
        tries++;
        return false;
      },
      receiptState: async () => ({ entryId: 'another-entry', receiptId: null, claimedAt: null }),
    };
    const refused = await service(flaky({ on: false }), elsewhere)
      .authorize(scope, input('owed'))
      .catch((e) => e);
    expect(refused.code).toBe('service_unavailable');
    expect(refused.message).toContain('earlier authorization');
    expect(tries).toBe(3);
    expect(await authorizationEntries(tenant.orgId, 'owed')).toHaveLength(1);
  });

  it('chains the owed receipt of a require_approval before a denied approval decides it again', async () => {
    const { tenant, scope } = await organization({ ...CONFIG, perActionApprovalThresholdUsd: 1 });
    const fail = { on: true };
    const svc = service(flaky(fail));
    expect(await svc.authorize(scope, input('ask')).catch((e) => e.code)).toBe('service_unavailable');
    const earlier = await actionRow(tenant.orgId, 'ask');
    expect(earlier.state).toBe('pending_approval');
    const resolved = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${earlier.approval_id}/resolve`,
      headers: asUser(tenant),
      payload: { action: 'deny' },
    });
    expect(resolved.statusCode).toBe(200);
    fail.on = false;
    const answer = await svc.authorize(scope, input('ask'));
    expect(answer).toMatchObject({ decision: 'deny', reasonCode: 'approval_denied' });
    const [old, ...dupes] = await receiptsFor(tenant.orgId, earlier.authorization_id);
    expect(dupes).toEqual([]);
    expect(old).toMatchObject({ decision: 'require_approval', approval_id: earlier.approval_id });
    const current = await actionRow(tenant.orgId, 'ask');
    expect(current.authorization_id).not.toBe(earlier.authorization_id);
    expect(await receiptsFor(tenant.orgId, current.authorization_id)).toHaveLength(1);
    // The approval's resolution chains a receipt of its own.
    await expectChainVerifies(tenant.orgId, 3);
  });
});

describe('the sweep of a process', () => {
  it('chains, when the server starts, the receipts of actions whose process died between the ledger and the receipt', async () => {
    const { tenant, scope } = await organization();
    await service(flaky({ on: false })).authorize(scope, input('settled'));
    // Dies right after the ledger's commit: no claim taken, no receipt written.
    const dying: SpendLedger = {
      ...createSpendLedger(t.store),
      claimReceipt: () => Promise.reject(new Error('process died')),
    };
    const svc = service(flaky({ on: false }), dying);
    await svc.authorize(scope, input('crashed')).catch(() => {});
    await svc.commit(scope, commitOf('settled')).catch(() => {});
    for (const [id, slot] of [
      ['crashed', 'authorize'],
      ['settled', 'commit'],
    ] as const) {
      expect(await actionRow(tenant.orgId, id)).toMatchObject({
        [`${slot}_receipt_id`]: null,
        [`${slot}_receipt_claimed_at`]: null,
      });
    }

    await t.close();
    t = await createTestApp({}, { database: db, clock });
    // The server answers while its first pass runs: wait (bounded) until that pass stored both.
    await expect
      .poll(
        async () =>
          (await actionRow(tenant.orgId, 'crashed')).authorize_receipt_id !== null &&
          (await actionRow(tenant.orgId, 'settled')).commit_receipt_id !== null,
        { timeout: 10_000, interval: 20 },
      )
      .toBe(true);
    const crashed = await actionRow(tenant.orgId, 'crashed');
    const settled = await actionRow(tenant.orgId, 'settled');
    const slots: [string, string | null][] = [
      [crashed.authorization_id, crashed.authorize_receipt_id],
      [settled.commit_id!, settled.commit_receipt_id],
    ];
    for (const [entry, id] of slots) {
      const receipts = await receiptsFor(tenant.orgId, entry);
      expect(receipts.map((r) => r.receipt_id)).toEqual([id]);
    }
    await expectChainVerifies(tenant.orgId, 3);
  });

  it('runs a pass at start and then periodically, logs a failed pass, and waits for the running pass on close', async () => {
    const errors: string[] = [];
    const block = gate();
    let passes = 0;
    let stopSeen = false;
    const sweep = receiptSweep({
      what: 'spend receipt repair sweep',
      intervalMs: 5,
      log: { error: (_o, msg) => errors.push(msg) },
      repair: async (stop) => {
        passes++;
        if (passes === 1) throw new Error('store down');
        if (passes === 3) {
          await block.opened;
          stopSeen = stop();
        }
        return 0;
      },
    });
    sweep.start();
    expect(passes).toBe(1);
    await expect.poll(() => errors).toEqual(['spend receipt repair sweep failed']);
    await expect.poll(() => passes).toBe(3);
    let closed = false;
    const closing = sweep.close().then(() => {
      closed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 30));
    // The third pass is still running (blocked): close waits for it, and no other pass starts.
    expect(closed).toBe(false);
    expect(passes).toBe(3);
    block.open();
    await closing;
    expect(stopSeen).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(passes).toBe(3);
  });

  it('does not wait for its first pass to start, and starts none once closed', async () => {
    const block = gate();
    let passes = 0;
    let stopSeen = false;
    const sweep = receiptSweep({
      what: 'spend receipt repair sweep',
      intervalMs: 60_000,
      log: silent,
      repair: async (stop) => {
        passes++;
        await block.opened;
        stopSeen = stop();
        return 0;
      },
    });
    // Returns while the first pass is held.
    expect(sweep.start()).toBeUndefined();
    expect(passes).toBe(1);
    let closed = false;
    const closing = sweep.close().then(() => {
      closed = true;
    });
    await Promise.resolve();
    expect(closed).toBe(false);
    block.open();
    await closing;
    expect(stopSeen).toBe(true);
    sweep.start();
    expect(passes).toBe(1);
  });
});
