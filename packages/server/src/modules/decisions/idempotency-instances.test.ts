import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, gate, keyHeader, type TestApp } from '../../../test/helpers.js';
import { reportedDecision as one } from '../../../test/ledger.js';
import { DEFAULT_STALE_CLAIM_MS } from '../../lib/idempotency.js';

// A fixed clock shared by both instances; `offset` moves it past the stale age on purpose.
const BASE = Date.parse('2026-11-21T12:00:30.000Z');
let offset = 0;
const clock = { now: () => new Date(BASE + offset) };

const batch = (...ns: number[]) => ns.map((n) => one(n));
const withKey = (apiKey: string, key: string) => ({ ...keyHeader(apiKey), 'idempotency-key': key });
const log = (t: TestApp, headers: Record<string, string>, payload: unknown) =>
  t.inject({ method: 'POST', url: '/v1/decisions', headers, payload: payload as object });

/** The ids an answer of POST /v1/decisions names, batch or single. */
const idsOf = (res: LightMyRequestResponse): string[] => {
  const body = res.json() as { ids?: string[]; id?: string };
  return body.ids ?? (body.id === undefined ? [] : [body.id]);
};

/**
 * Holds the instance's next commit of client decisions (a batch goes through writeAll, a single one
 * through write) until `release()`: the request is then past its claim, waiting for the store.
 */
function holdNextCommit(t: TestApp, single: boolean) {
  const held = gate();
  const reached = gate();
  const writer = t.ctx.writer;
  const write = writer.write.bind(writer);
  const writeAll = writer.writeAll.bind(writer);
  const spy = single
    ? vi.spyOn(writer, 'write').mockImplementationOnce(async (item) => {
        reached.open();
        await held.opened;
        return write(item);
      })
    : vi.spyOn(writer, 'writeAll').mockImplementationOnce(async (items) => {
        reached.open();
        await held.opened;
        return writeAll(items);
      });
  return {
    reached: reached.opened,
    release: () => {
      held.open();
      spy.mockRestore();
    },
  };
}

/**
 * Two instances on one store: a request still waiting for the store after the stale age on one of
 * them looks abandoned to the other, which takes its claim over. Both requests reach the store; the
 * batch must be recorded once, and both answers (and every replay) name the same ids.
 */
describe('POST /v1/decisions with an Idempotency-Key on two instances', () => {
  const a = useTestApp({}, { clock });
  const b = useTestApp({}, () => ({ database: a.database, clock }));

  /** The organization's receipts in chain order, and how many decisions carry each of `ids`. */
  async function ledger(orgId: string, ids: string[]) {
    const receipts = await a.store.db
      .selectFrom('receipts')
      .select(['payload', 'decision_id'])
      .where('organization_id', '=', orgId)
      .orderBy('sequence')
      .execute();
    const decisions = await a.store.db
      .selectFrom('decisions')
      .select('id')
      .where('organization_id', '=', orgId)
      .execute();
    return {
      receipts: receipts.length,
      decisions: decisions.length,
      each: ids.map((id) => receipts.filter((r) => r.decision_id === id).length),
      chain: await verifyReceipts(receipts.map((r) => r.payload)),
    };
  }

  /** The organization's log holds `ids` once each and nothing else, in a chain that verifies. */
  async function expectRecordedOnce(orgId: string, ids: string[]) {
    const after = await ledger(orgId, ids);
    expect(after.each).toEqual(ids.map(() => 1));
    expect([after.receipts, after.decisions]).toEqual([ids.length, ids.length]);
    expect(after.chain.errors).toEqual([]);
    expect(after.chain.ok).toBe(true);
  }

  /** The answers every later send of the request gets, on either instance: the same 201, replayed. */
  async function expectReplays(headers: Record<string, string>, payload: unknown, ids: string[]) {
    for (const t of [a, b]) {
      const again = await log(t, headers, payload);
      expect([again.statusCode, again.headers['idempotent-replayed']]).toEqual([201, 'true']);
      expect(idsOf(again)).toEqual(ids);
    }
  }

  it('keeps the claim of a takeover that failed, so a retry records under the same ids', async () => {
    const tenant = await createTenant(a);
    const headers = withKey(tenant.apiKey, 'takeover-failed');
    const payload = batch(5, 6);
    const held = holdNextCommit(a, false);
    let first: Promise<LightMyRequestResponse> | undefined;
    const failing = vi
      .spyOn(b.ctx.writer, 'writeAll')
      .mockRejectedValueOnce(Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' }));
    try {
      first = log(a, headers, payload);
      await held.reached;
      offset = DEFAULT_STALE_CLAIM_MS + 1000;
      // B takes A's claim over and fails with a server error of its own while A still waits.
      expect((await log(b, headers, payload)).statusCode).toBeGreaterThanOrEqual(500);
      failing.mockRestore();
      // The key stays taken: sent again at once, the request waits instead of claiming it anew.
      expect((await log(b, headers, payload)).statusCode).toBe(409);
      held.release();
      const early = await first;
      expect(early.statusCode).toBe(201);
      // Once B's claim is stale, the request sent again finds the batch A recorded and replays it.
      offset = 2 * (DEFAULT_STALE_CLAIM_MS + 1000);
      const again = await log(b, headers, payload);
      expect(again.statusCode).toBe(201);
      expect(idsOf(again)).toEqual(idsOf(early));
      const after = await ledger(tenant.orgId, idsOf(early));
      expect([after.receipts, after.decisions]).toEqual([2, 2]);
      expect(after.chain.ok).toBe(true);
    } finally {
      failing.mockRestore();
      held.release();
      await first?.catch(() => {});
      offset = 0;
    }
  });

  for (const [form, payload] of [
    ['a batch', batch(1, 2, 3)],
    ['a single decision', one(4)],
  ] as const) {
    const single = !Array.isArray(payload);
    const count = single ? 1 : payload.length;

    it(`records ${form} once when the request taken over commits after the takeover did`, async () => {
      const tenant = await createTenant(a);
      const headers = withKey(tenant.apiKey, `taken-over-${count}`);
      const held = holdNextCommit(a, single);
      let first: Promise<LightMyRequestResponse> | undefined;
      try {
        first = log(a, headers, payload);
        await held.reached;
        offset = DEFAULT_STALE_CLAIM_MS + 1000;
        // A's request is still waiting for the store: to B its claim looks abandoned.
        const second = await log(b, headers, payload);
        expect([second.statusCode, second.headers['idempotent-replayed']]).toEqual([201, undefined]);
        held.release();
        const late = await first;
        // Its commit found the batch recorded under the same ids: it answers the same 201.
        expect(late.statusCode).toBe(201);
        expect(idsOf(late)).toEqual(idsOf(second));
        expect(idsOf(second)).toHaveLength(count);
        await expectReplays(headers, payload, idsOf(second));
        await expectRecordedOnce(tenant.orgId, idsOf(second));
      } finally {
        held.release();
        await first?.catch(() => {});
        offset = 0;
      }
    });

    it(`records ${form} once when the takeover commits after the request it took over did`, async () => {
      const tenant = await createTenant(a);
      const headers = withKey(tenant.apiKey, `took-over-${count}`);
      const heldA = holdNextCommit(a, single);
      let heldB: ReturnType<typeof holdNextCommit> | undefined;
      let first: Promise<LightMyRequestResponse> | undefined;
      let second: Promise<LightMyRequestResponse> | undefined;
      try {
        first = log(a, headers, payload);
        await heldA.reached;
        offset = DEFAULT_STALE_CLAIM_MS + 1000;
        heldB = holdNextCommit(b, single);
        second = log(b, headers, payload);
        await heldB.reached;
        heldA.release();
        const early = await first;
        expect(early.statusCode).toBe(201);
        expect(idsOf(early)).toHaveLength(count);
        // The key is B's claim now, unanswered: the same request waits for it.
        expect((await log(a, headers, payload)).statusCode).toBe(409);
        heldB.release();
        const late = await second;
        // B's commit found the batch recorded under the same ids: it answers (and keeps) that 201.
        expect([late.statusCode, late.headers['idempotent-replayed']]).toEqual([201, undefined]);
        expect(idsOf(late)).toEqual(idsOf(early));
        await expectReplays(headers, payload, idsOf(early));
        await expectRecordedOnce(tenant.orgId, idsOf(early));
      } finally {
        heldA.release();
        heldB?.release();
        await Promise.allSettled([first, second]);
        offset = 0;
      }
    });
  }
});
