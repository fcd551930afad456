import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader } from '../../../test/helpers.js';
import { reportedDecision as one } from '../../../test/ledger.js';
import type { Clock } from '../../lib/clock.js';
import { MAX_LOG_BATCH } from './schemas.js';

// A fixed clock keeps the 120-per-minute window from rolling over in the middle of a test.
const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };

const t = useTestApp({}, { clock });

const log = (headers: Record<string, string>, payload: unknown) =>
  t.inject({ method: 'POST', url: '/v1/decisions', headers, payload: payload as object });

async function chainOf(orgId: string): Promise<string[]> {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('payload')
    .where('organization_id', '=', orgId)
    .orderBy('sequence')
    .execute();
  return rows.map((r) => r.payload);
}

describe('POST /v1/decisions with a batch', () => {
  it('records every decision of the array in order, as one request against the limit', async () => {
    const a = await createTenant(t);
    const batch = Array.from({ length: 5 }, (_, n) => one(n, n === 3 ? 'deny' : 'allow'));
    const res = await log(keyHeader(a.apiKey), batch);
    expect(res.statusCode).toBe(201);
    expect(res.headers['x-ratelimit-remaining']).toBe('119');
    const { ids } = res.json() as { ids: string[] };
    expect(ids).toHaveLength(5);
    for (const [n, id] of ids.entries()) {
      const got = await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: asUser(a) });
      expect(got.json()).toMatchObject({
        toolName: `tool-${n % 3}`,
        arguments: { n },
        decision: n === 3 ? 'deny' : 'allow',
        context: { session_id: 's1', source: 'client' },
      });
    }
    const chain = await chainOf(a.orgId);
    expect(chain.map((p) => JSON.parse(p).decision_id)).toEqual(ids);
    expect(await verifyReceipts(chain)).toMatchObject({ ok: true, count: 5 });
  });

  it(`takes up to ${MAX_LOG_BATCH} decisions in one request`, async () => {
    const a = await createTenant(t);
    const res = await log(
      keyHeader(a.apiKey),
      Array.from({ length: MAX_LOG_BATCH }, (_, n) => one(n)),
    );
    expect(res.statusCode).toBe(201);
    expect(await chainOf(a.orgId)).toHaveLength(MAX_LOG_BATCH);
  });

  it.each([
    [[], 'body must hold 1 to'],
    [Array.from({ length: MAX_LOG_BATCH + 1 }, (_, n) => one(n)), 'body must hold 1 to'],
    [[one(1), { ...one(2), decision: 'require_approval' }], 'body/1/decision'],
    [[one(1), one(2), { ...one(3), tool_name: undefined }], 'body/2/tool_name'],
    [[one(1), 'x'], 'body/1'],
    [[one(1), { ...one(2), latency_ms: -1 }], 'body/1/latency_ms'],
  ])('refuses a bad batch %# whole with 400 naming the item, records nothing', async (payload, field) => {
    const a = await createTenant(t);
    const res = await log(keyHeader(a.apiKey), payload);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
    expect(await chainOf(a.orgId)).toEqual([]);
  });

  it('refuses a batch with an item nested too deep, records nothing', async () => {
    const a = await createTenant(t);
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 70; i++) deep = { d: deep };
    const res = await log(keyHeader(a.apiKey), [one(1), { ...one(2), arguments: deep }]);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('body/1');
    expect(await chainOf(a.orgId)).toEqual([]);
  });

  it('records nothing of a batch when one decision cannot be recorded (503)', async () => {
    const a = await createTenant(t);
    const writer = t.ctx.writer;
    const real = writer.writeAll.bind(writer);
    // The second row breaks a NOT NULL column: the store refuses it inside the batch's transaction.
    const spy = vi
      .spyOn(writer, 'writeAll')
      .mockImplementationOnce((items) =>
        real(
          items.map((it, i) =>
            i === 1 ? { ...it, decision: { ...it.decision!, reason: null as unknown as string } } : it,
          ),
        ),
      );
    try {
      expectError(await log(keyHeader(a.apiKey), [one(1), one(2), one(3)]), 503, 'service_unavailable');
    } finally {
      spy.mockRestore();
    }
    expect(await chainOf(a.orgId)).toEqual([]);
    expect((await log(keyHeader(a.apiKey), [one(4), one(5)])).statusCode).toBe(201);
    expect(await verifyReceipts(await chainOf(a.orgId))).toMatchObject({ ok: true, count: 2 });
  });

  it('records a batch into the caller organization only', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const res = await log(keyHeader(b.apiKey), [one(1), one(2)]);
    expect(await chainOf(a.orgId)).toEqual([]);
    expect(await chainOf(b.orgId)).toHaveLength(2);
    for (const id of res.json().ids) {
      expectError(
        await t.inject({ method: 'GET', url: `/v1/decisions/${id}`, headers: keyHeader(a.apiKey) }),
        404,
        'not_found',
      );
    }
  });

  it('needs an API key for batches too', async () => {
    const a = await createTenant(t);
    expectError(await log(asUser(a), [one(1)]), 403, 'authorization_error');
    expectError(await log({}, [one(1)]), 401, 'unauthorized');
  });
});
