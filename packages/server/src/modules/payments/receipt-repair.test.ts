import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  asUser,
  createTenant,
  createTestApp,
  freshDatabase,
  keyHeader,
  type Tenant,
  type TestApp,
  type TestDatabase,
} from '../../../test/helpers.js';

const PAYEE = { name: 'Repair Supplies', account_number: 'DE0011223344' };

let db: TestDatabase;
let t: TestApp;
let a: Tenant;

beforeAll(async () => {
  db = await freshDatabase();
  t = await createTestApp({}, { database: db });
  a = await createTenant(t);
  const pack = await t.inject({
    method: 'PUT',
    url: '/v1/gateway/packs/repair',
    headers: asUser(a),
    payload: { allowed_rails: ['ach'], quarantine_seconds: 0 },
  });
  expect(pack.statusCode).toBe(201);
});
afterAll(async () => {
  await t.close();
  await db.drop();
});

let seq = 0;
/** Mints a capsule and consumes it with the receipt writer failing as `fail` says. */
async function consumeFailing(app: TestApp, fail: 'before' | 'after') {
  const minted = await app.inject({
    method: 'POST',
    url: '/v1/gateway/capsules',
    headers: keyHeader(a.apiKey),
    payload: {
      entity_id: `repair-${++seq}`,
      agent_id: 'agent',
      pack_id: 'repair',
      rails: ['ach'],
      beneficiary: { details: PAYEE },
      amount_ceiling: { currency: 'USD', amount: '50.00' },
      ttl_seconds: 300,
    },
  });
  expect(minted.statusCode).toBe(201);
  const writer = app.ctx.writer;
  const original = writer.write.bind(writer);
  // 'before': nothing is chained; 'after': the receipt commits but its writer's answer is lost.
  const spy = vi.spyOn(writer, 'write').mockImplementationOnce(async (item) => {
    if (fail === 'after') await original(item);
    throw new Error('disk full');
  });
  const res = await app.inject({
    method: 'POST',
    url: '/v1/gateway/capsules/consume',
    headers: keyHeader(a.apiKey),
    payload: {
      capsule: minted.json().capsule,
      amount: '20.00',
      currency: 'USD',
      rail: 'ach',
      beneficiary: PAYEE,
    },
  });
  spy.mockRestore();
  expect(res.statusCode).toBe(503);
  expect(res.json().error.code).toBe('service_unavailable');
  return minted.json().id as string;
}

const stored = (app: TestApp, id: string) =>
  app.store.db
    .selectFrom('gateway_capsules' as never)
    .selectAll()
    .where('organization_id' as never, '=', a.orgId as never)
    .where('id' as never, '=', id as never)
    .executeTakeFirstOrThrow() as Promise<{ status: string; receipt_id: string | null; consumption: string }>;

async function receiptsOf(app: TestApp, ledgerEntryId: string) {
  return app.store.db
    .selectFrom('receipts')
    .select(['receipt_id', 'payload'])
    .where('organization_id', '=', a.orgId)
    .where('decision_id', '=', ledgerEntryId)
    .execute();
}

describe('a consume whose receipt write failed', () => {
  it('is consumed with its spend, and its receipt is written on the next read', async () => {
    const id = await consumeFailing(t, 'before');
    const row = await stored(t, id);
    expect(row.status).toBe('consumed');
    expect(row.receipt_id).toBeNull();
    const { ledger_entry_id } = JSON.parse(row.consumption);
    const ledger = await t.store.db
      .selectFrom('spend_ledger')
      .select('amount_micros')
      .where('organization_id', '=', a.orgId)
      .where('id', '=', ledger_entry_id)
      .execute();
    expect(ledger.map((l) => Number(l.amount_micros))).toEqual([20_000_000]);
    expect(await receiptsOf(t, ledger_entry_id)).toHaveLength(0);

    const read = await t.inject({
      method: 'GET',
      url: `/v1/gateway/capsules/${id}`,
      headers: keyHeader(a.apiKey),
    });
    expect(read.statusCode).toBe(200);
    const receipts = await receiptsOf(t, ledger_entry_id);
    expect(receipts).toHaveLength(1);
    expect(read.json().receipt_id).toBe(receipts[0]!.receipt_id);
    expect(JSON.parse(receipts[0]!.payload)).toMatchObject({
      decision: 'allow',
      tool_name: 'gateway.consume',
      action_id: `capsule:${id}`,
      amount_micros: 20_000_000,
      policy_version: 1,
    });
    // A second read finds the receipt in place and writes nothing more.
    await t.inject({ method: 'GET', url: `/v1/gateway/capsules/${id}`, headers: keyHeader(a.apiKey) });
    expect(await receiptsOf(t, ledger_entry_id)).toHaveLength(1);
  });

  it('reuses a receipt that was chained before the failure instead of writing a second', async () => {
    const id = await consumeFailing(t, 'after');
    const { ledger_entry_id } = JSON.parse((await stored(t, id)).consumption);
    expect(await receiptsOf(t, ledger_entry_id)).toHaveLength(1);
    const read = await t.inject({
      method: 'GET',
      url: `/v1/gateway/capsules/${id}`,
      headers: keyHeader(a.apiKey),
    });
    const receipts = await receiptsOf(t, ledger_entry_id);
    expect(receipts).toHaveLength(1);
    expect(read.json().receipt_id).toBe(receipts[0]!.receipt_id);
  });

  it('gets its receipt when the server starts again, without any read', async () => {
    const ids = [await consumeFailing(t, 'before'), await consumeFailing(t, 'before')];
    await t.close();
    t = await createTestApp({}, { database: db });
    for (const id of ids) {
      // The pass starts with the server, which does not wait for it.
      await vi.waitFor(async () => expect((await stored(t, id)).receipt_id).not.toBeNull(), {
        timeout: 10_000,
        interval: 20,
      });
      const row = await stored(t, id);
      const receipts = await receiptsOf(t, JSON.parse(row.consumption).ledger_entry_id);
      expect(receipts.map((r) => r.receipt_id)).toEqual([row.receipt_id]);
    }
  });
});
