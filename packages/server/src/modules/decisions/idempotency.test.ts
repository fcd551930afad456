import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { reportedDecision as one } from '../../../test/ledger.js';
import type { ServiceEvent } from '../../events/bus.js';
import { hashJson } from '../../ledger/canonical.js';
import type { Clock } from '../../lib/clock.js';
import { createIdempotencyStore, type IdempotencyRow } from '../../lib/idempotency-store.js';
import { StoreUnavailableError } from '../../storage/db.js';

// A fixed clock keeps the 120-per-minute window from rolling over; `offset` moves it on purpose.
const BASE = Date.parse('2026-11-21T12:00:30.000Z');
let offset = 0;
const clock: Clock = { now: () => new Date(BASE + offset) };

const t = useTestApp({}, { clock });

const batch = (...ns: number[]) => ns.map((n) => one(n));

const log = (headers: Record<string, string>, payload: unknown) =>
  t.inject({ method: 'POST', url: '/v1/decisions', headers, payload: payload as object });
const withKey = (apiKey: string, key: string) => ({ ...keyHeader(apiKey), 'idempotency-key': key });

/** Receipts of the organization: one per recorded decision. */
async function recorded(orgId: string): Promise<number> {
  const rows = await t.store.db
    .selectFrom('receipts')
    .select('sequence')
    .where('organization_id', '=', orgId)
    .execute();
  return rows.length;
}

async function listedTotal(tenant: Tenant): Promise<number> {
  const res = await t.inject({ method: 'GET', url: '/v1/decisions', headers: asUser(tenant) });
  return res.json().pagination.total;
}

/** Stored Idempotency-Keys of the organization (decision log and gateway share the table). */
async function storedKeys(orgId: string): Promise<string[]> {
  const rows = await t.store.db
    .withTables<{ gateway_idempotency: IdempotencyRow }>()
    .selectFrom('gateway_idempotency')
    .select('idempotency_key')
    .where('organization_id', '=', orgId)
    .execute();
  return rows.map((r) => r.idempotency_key).sort();
}

/** A second project of the tenant's organization, and its API key. */
async function sibling(tenant: Tenant): Promise<{ projectId: string; apiKey: string }> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: { authorization: `Bearer ${tenant.token}` },
    payload: { organizationId: tenant.orgId, name: 'Sibling' },
  });
  expect(res.statusCode).toBe(201);
  return { projectId: res.json()._id, apiKey: res.json().apiKey };
}

/** Holds the next batch write until the returned release() is called. */
function holdNextBatch() {
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  let entered!: () => void;
  const writing = new Promise<void>((r) => {
    entered = r;
  });
  const writer = t.ctx.writer;
  const real = writer.writeAll.bind(writer);
  const spy = vi.spyOn(writer, 'writeAll').mockImplementationOnce(async (items) => {
    entered();
    await gate;
    return real(items);
  });
  return { release, writing, restore: () => spy.mockRestore() };
}

describe('POST /v1/decisions with an Idempotency-Key', () => {
  it('replays the first answer for the same batch: same ids, nothing recorded or published again', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'batch-1');
    const first = await log(headers, batch(1, 2, 3));
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(await recorded(a.orgId)).toBe(3);

    const events: ServiceEvent[] = [];
    const stop = t.ctx.events.subscribe((e) => {
      if (e.organizationId === a.orgId) events.push(e);
    });
    try {
      // The same request, its members in another order: the canonical body is the same.
      const again = await log(
        headers,
        batch(1, 2, 3).map(({ source, mode, ...rest }) => ({ ...rest, source, mode })),
      );
      expect(again.statusCode).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.json()).toEqual(first.json());
      // A replay is one more request against the logging budget, not one more decision.
      expect(again.headers['x-ratelimit-remaining']).toBe('118');
    } finally {
      stop();
    }
    expect(events).toEqual([]);
    expect(await recorded(a.orgId)).toBe(3);
    expect(await listedTotal(a)).toBe(3);
  });

  it('replays a single decision as well', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'single-1');
    const first = await log(headers, one(7));
    expect(first.json()).toEqual({ success: true, id: expect.any(String) });
    const again = await log(headers, one(7));
    expect([again.statusCode, again.headers['idempotent-replayed']]).toEqual([201, 'true']);
    expect(again.json()).toEqual(first.json());
    expect(await recorded(a.orgId)).toBe(1);
  });

  it('answers 400 idempotency_key_reused_with_different_payload for another body, records nothing', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'batch-2');
    expect((await log(headers, batch(1, 2))).statusCode).toBe(201);
    for (const other of [batch(1, 2, 3), batch(2, 1), [{ ...one(1), decision: 'deny' }, one(2)], one(1)]) {
      const res = await log(headers, other);
      expectError(res, 400, 'idempotency_key_reused_with_different_payload');
      expect(res.json().error.message).toContain('Idempotency-Key');
    }
    expect(await recorded(a.orgId)).toBe(2);
    // The first answer is still the key's.
    expect((await log(headers, batch(1, 2))).headers['idempotent-replayed']).toBe('true');
  });

  it('without the header, the same batch sent twice is recorded twice (as before)', async () => {
    const a = await createTenant(t);
    const first = await log(keyHeader(a.apiKey), batch(1));
    const second = await log(keyHeader(a.apiKey), batch(1));
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    expect(second.json().ids).not.toEqual(first.json().ids);
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('refuses a malformed key with 400 validation_failed, records nothing and takes no key', async () => {
    const a = await createTenant(t);
    for (const bad of ['', ' ', 'a\tb', 'é', 'x'.repeat(256)]) {
      const res = await log(withKey(a.apiKey, bad), batch(1));
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain('Idempotency-Key');
    }
    expect(await recorded(a.orgId)).toBe(0);
    expect(await storedKeys(a.orgId)).toEqual([]);
    expect((await log(withKey(a.apiKey, `!" ~${'x'.repeat(251)}`), batch(1))).statusCode).toBe(201);
  });

  it('checks the body first: an invalid body answers 400 and leaves the key free', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'fix-me');
    const bad = await log(headers, [one(1), { ...one(2), decision: 'require_approval' }]);
    expectError(bad, 400, 'validation_failed');
    expect(bad.json().error.message).toContain('body/1/decision');
    expectError(await log(headers, []), 400, 'validation_failed');
    expect(await storedKeys(a.orgId)).toEqual([]);
    const good = await log(headers, [one(1), one(2)]);
    expect([good.statusCode, good.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('still answers 400 missing_project for a key without a project, taking no key', async () => {
    const a = await createTenant(t);
    const created = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(a.apiKey),
      payload: { name: 'orphan', projectId: a.projectId },
    });
    await t.store.db
      .updateTable('api_keys')
      .set({ project_id: null })
      .where('organization_id', '=', a.orgId)
      .where('name', '=', 'orphan')
      .execute();
    expectError(await log(withKey(created.json().key, 'k'), batch(1)), 400, 'missing_project');
    expect(await storedKeys(a.orgId)).toEqual([]);
  });

  it('keeps keys per project and per organization, apart from the gateway’s', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const { projectId: siblingProject, apiKey: siblingApiKey } = await sibling(a);
    const mine = await log(withKey(a.apiKey, 'shared'), batch(1));
    // Another project of the organization, and another organization: their own key spaces.
    const theirs = await log(withKey(siblingApiKey, 'shared'), batch(5, 6));
    const others = await log(withKey(b.apiKey, 'shared'), batch(1));
    for (const res of [theirs, others]) {
      expect([res.statusCode, res.headers['idempotent-replayed']]).toEqual([201, undefined]);
    }
    expect(theirs.json().ids).toHaveLength(2);
    expect(others.json().ids).not.toEqual(mine.json().ids);
    // Each replays its own answer.
    expect((await log(withKey(siblingApiKey, 'shared'), batch(5, 6))).json()).toEqual(theirs.json());
    expect((await log(withKey(a.apiKey, 'shared'), batch(1))).json()).toEqual(mine.json());
    // The gateway of the same project takes the same key as a key of its own.
    const payee = await t.inject({
      method: 'POST',
      url: '/v1/gateway/payees',
      headers: withKey(a.apiKey, 'shared'),
      payload: { details: { name: 'Idem Vendor', account_number: 'DE89370400440532013000' } },
    });
    expect([payee.statusCode, payee.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await storedKeys(a.orgId)).toEqual(
      [
        `${a.projectId}/shared`,
        `decisions:${a.projectId}/shared`,
        `decisions:${siblingProject}/shared`,
      ].sort(),
    );
    expect(await recorded(a.orgId)).toBe(3);
    expect(await recorded(b.orgId)).toBe(1);
  });

  it('frees the key when the batch could not be recorded (503): the retry records it once', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'retry-after-503');
    const spy = vi.spyOn(t.ctx.writer, 'writeAll').mockRejectedValueOnce(new Error('disk full'));
    try {
      expectError(await log(headers, batch(1, 2)), 503, 'service_unavailable');
    } finally {
      spy.mockRestore();
    }
    expect(await recorded(a.orgId)).toBe(0);
    const retry = await log(headers, batch(1, 2));
    expect([retry.statusCode, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect((await log(headers, batch(1, 2))).json()).toEqual(retry.json());
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('keeps the 201 of a batch committed whose acknowledgement failed: the retry replays it', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'committed-then-503');
    const writer = t.ctx.writer;
    const real = writer.writeAll.bind(writer);
    const spy = vi.spyOn(writer, 'writeAll').mockImplementationOnce(async (items) => {
      await real(items);
      throw new Error('the connection ended before COMMIT was acknowledged');
    });
    try {
      expectError(await log(headers, batch(1, 2)), 503, 'service_unavailable');
    } finally {
      spy.mockRestore();
    }
    expect(await recorded(a.orgId)).toBe(2);
    const retry = await log(headers, batch(1, 2));
    expect([retry.statusCode, retry.headers['idempotent-replayed']]).toEqual([201, 'true']);
    expect(retry.json().ids).toHaveLength(2);
    const listed = await t.inject({ method: 'GET', url: '/v1/decisions', headers: asUser(a) });
    expect(
      listed
        .json()
        .data.map((d: { id: string }) => d.id)
        .sort(),
    ).toEqual([...retry.json().ids].sort());
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('keeps the key of a batch whose commit the store stopped answering, and replays it once known', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'store-went-away');
    const writer = t.ctx.writer;
    const real = writer.writeAll.bind(writer);
    const spy = vi.spyOn(writer, 'writeAll').mockImplementationOnce(async (items) => {
      await real(items);
      throw new StoreUnavailableError('the store did not answer COMMIT in time');
    });
    try {
      expectError(await log(headers, batch(1, 2)), 503, 'service_unavailable');
    } finally {
      spy.mockRestore();
    }
    // Whether it committed is not known yet: the same batch waits rather than being recorded again.
    expectError(await log(headers, batch(1, 2)), 409, 'idempotency_request_in_progress');
    offset = 61_000;
    try {
      const later = await log(headers, batch(1, 2));
      expect([later.statusCode, later.headers['idempotent-replayed']]).toEqual([201, 'true']);
    } finally {
      offset = 0;
    }
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('answers 409 idempotency_request_in_progress while the first request runs, then replays it', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'slow');
    const held = holdNextBatch();
    let first: Promise<Awaited<ReturnType<typeof log>>>;
    try {
      first = log(headers, batch(1, 2));
      await held.writing;
      const meanwhile = await log(headers, batch(1, 2));
      expectError(meanwhile, 409, 'idempotency_request_in_progress');
      expect(meanwhile.json().error.message).toContain('still running');
      // A different body is refused as such even while the first runs.
      expectError(await log(headers, batch(3)), 400, 'idempotency_key_reused_with_different_payload');
    } finally {
      held.release();
      held.restore();
    }
    const done = await first;
    expect(done.statusCode).toBe(201);
    const again = await log(headers, batch(1, 2));
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json()).toEqual(done.json());
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('takes over a claim left unanswered for a minute (the process died mid-request)', async () => {
    const a = await createTenant(t);
    // What a request that died before answering leaves: its claim, without an answer.
    const hash = hashJson({ method: 'POST', path: '/v1/decisions', body: batch(1) });
    const claimedAt = new Date(BASE - 30_000).toISOString();
    await createIdempotencyStore(t.store.db).takeKey(
      a.orgId,
      `decisions:${a.projectId}/orphaned`,
      hash,
      claimedAt,
    );
    expectError(await log(withKey(a.apiKey, 'orphaned'), batch(1)), 409, 'idempotency_request_in_progress');
    offset = 31_000;
    try {
      const res = await log(withKey(a.apiKey, 'orphaned'), batch(1));
      expect([res.statusCode, res.headers['idempotent-replayed']]).toEqual([201, undefined]);
    } finally {
      offset = 0;
    }
    expect(await recorded(a.orgId)).toBe(1);
  });

  it('replays, after a minute, a batch recorded by a request whose answer was never stored', async () => {
    const a = await createTenant(t);
    for (const [name, payload] of [
      ['died-after-commit', batch(1, 2)],
      ['died-after-commit-one', one(3)],
    ] as const) {
      const first = await log(withKey(a.apiKey, name), payload);
      expect(first.statusCode).toBe(201);
      // What a process that died between the commit and storing its answer leaves: the claim, unanswered.
      await t.store.db
        .withTables<{ gateway_idempotency: IdempotencyRow }>()
        .updateTable('gateway_idempotency')
        .set({ status_code: null, response: null })
        .where('organization_id', '=', a.orgId)
        .where('idempotency_key', '=', `decisions:${a.projectId}/${name}`)
        .execute();
      expectError(await log(withKey(a.apiKey, name), payload), 409, 'idempotency_request_in_progress');
      offset = 61_000;
      try {
        const again = await log(withKey(a.apiKey, name), payload);
        expect([again.statusCode, again.headers['idempotent-replayed']]).toEqual([201, 'true']);
        expect(again.json()).toEqual(first.json());
        const later = await log(withKey(a.apiKey, name), payload);
        expect(later.headers['idempotent-replayed']).toBe('true');
      } finally {
        offset = 0;
      }
    }
    expect(await recorded(a.orgId)).toBe(3);
    expect(await listedTotal(a)).toBe(3);
  });

  it('never takes over the claim of a request still running in this process, however long it runs', async () => {
    const a = await createTenant(t);
    const headers = withKey(a.apiKey, 'stuck');
    const held = holdNextBatch();
    let first: Promise<Awaited<ReturnType<typeof log>>>;
    try {
      first = log(headers, batch(1, 2));
      await held.writing;
      offset = 61_000;
      expectError(await log(headers, batch(1, 2)), 409, 'idempotency_request_in_progress');
    } finally {
      offset = 0;
      held.release();
      held.restore();
    }
    const done = await first;
    expect(done.statusCode).toBe(201);
    expect((await log(headers, batch(1, 2))).json()).toEqual(done.json());
    expect(await recorded(a.orgId)).toBe(2);
  });

  it('keeps a key 24 hours, then deletes the organization’s expired decision-log keys', async () => {
    const a = await createTenant(t);
    const old = await log(withKey(a.apiKey, 'day-old'), batch(1));
    expect(old.statusCode).toBe(201);
    await t.inject({
      method: 'POST',
      url: '/v1/gateway/payees',
      headers: withKey(a.apiKey, 'gateway-day-old'),
      payload: { details: { name: 'Old Vendor', account_number: 'DE02120300000000202051' } },
    });
    offset = 12 * 3600 * 1000;
    try {
      // Within 24 hours: still replayed.
      expect((await log(withKey(a.apiKey, 'day-old'), batch(1))).headers['idempotent-replayed']).toBe('true');
      offset = 24 * 3600 * 1000 + 1000;
      // Past them: a new request with another key sweeps the expired ones of the decision log only.
      expect((await log(withKey(a.apiKey, 'next-day'), batch(2))).statusCode).toBe(201);
      expect(await storedKeys(a.orgId)).toEqual(
        [`${a.projectId}/gateway-day-old`, `decisions:${a.projectId}/next-day`].sort(),
      );
      // The old key is free: the same key records again.
      const again = await log(withKey(a.apiKey, 'day-old'), batch(1));
      expect([again.statusCode, again.headers['idempotent-replayed']]).toEqual([201, undefined]);
      expect(again.json().ids).not.toEqual(old.json().ids);
    } finally {
      offset = 0;
    }
    expect(await recorded(a.orgId)).toBe(3);
  });
});
