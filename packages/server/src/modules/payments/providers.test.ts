import { randomBytes } from 'node:crypto';
import type { KyselyPlugin, RootOperationNode } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { gatewayKit } from '../../../test/gateway-kit.js';
import {
  asUser,
  createTenant,
  createTestApp,
  freshDatabase,
  type Tenant,
  withTestApp,
} from '../../../test/helpers.js';
import { TestPaymentProvider } from '../../../test/payment-provider.js';
import { openStore } from '../../storage/db.js';
import { createSpendLedger } from '../budgets/repository.js';
import { routeOf } from './consume-flow.js';
import { GatewayError } from './model.js';
import {
  createPaymentRepository,
  createProviderRepository,
  createProviderService,
  openCredentials,
  sealCredentials,
} from './providers.js';
import { createWorkflowService } from './workflows.js';

let a: Tenant;
let b: Tenant;
let k: ReturnType<typeof gatewayKit>;
let provider: TestPaymentProvider;
let offset = 0;
const clock = { now: () => new Date(Date.now() + offset) };
const KEY = randomBytes(32);

const PAYEE = { name: 'Initech', account_number: 'US000111222333' };
const PACK = {
  allowed_rails: ['card', 'check', 'cheque', 'wire', 'slow', 'busy', 'ledger', 'ach'],
  quarantine_seconds: 0,
  entity_caps: { usd_24h: '1000' },
};

const t = useTestApp({ providerCredentialsKey: KEY }, { clock });
beforeAll(async () => {
  provider = await new TestPaymentProvider().start();
  a = await createTenant(t);
  b = await createTenant(t);
  k = gatewayKit(t);
});
afterAll(async () => {
  await provider.stop();
});

let entitySeq = 0;
async function setup(
  x: Tenant,
  rail: string,
  mode: Parameters<TestPaymentProvider['endpoint']>[1],
  timeout = 2000,
) {
  const path = `${rail}-${++entitySeq}`;
  const conn = k.ok(
    await k.inject('POST', '/v1/gateway/providers', asUser(x), {
      name: `psp ${path}`,
      rail,
      url: provider.endpoint(path, mode),
      credentials: { authorization: `Bearer sk_${path}` },
      timeout_ms: timeout,
    }),
    201,
  );
  return { conn, path };
}

async function capsuleFor(x: Tenant, rail: string, amount = '100') {
  const packId = await k.pack(x, PACK);
  const payee = await k.payee(x, PAYEE);
  const entity = `entity-${++entitySeq}`;
  const minted = k.ok(
    await k.mint(x, {
      entity_id: entity,
      pack_id: packId,
      rails: [rail],
      beneficiary: { payee_id: payee.id },
      amount_ceiling: { currency: 'USD', amount },
    }),
    201,
  );
  return { ...minted, entity } as { id: string; capsule: string; entity: string };
}

const pay = (x: Tenant, capsule: string, rail: string, amount = '100') =>
  k.consume(x, { capsule, amount, currency: 'USD', rail, beneficiary: PAYEE });

async function ledgerCommits(org: string, capsuleId: string) {
  const rows = await t.store.db
    .selectFrom('spend_ledger')
    .select(['id'])
    .where('organization_id', '=', org)
    .where('action_id', '=', `capsule:${capsuleId}`)
    .where('kind', '=', 'commit')
    .execute();
  return rows.length;
}

describe('provider connections', () => {
  it('are configured by people, keep credentials write-only and sealed, and obey the address guard', async () => {
    const { conn, path } = await setup(a, 'card', 'ok');
    expect(conn).toMatchObject({ rail: 'card', credentials: { configured: true, names: ['authorization'] } });
    expect(JSON.stringify(conn)).not.toContain(`sk_${path}`);
    const row = await t.store.db
      .selectFrom('gateway_providers' as never)
      .selectAll()
      .where('id' as never, '=', conn.id as never)
      .executeTakeFirst();
    // The whole secret (a short piece may occur by chance in the sealed value's base64url).
    expect(JSON.stringify(row)).not.toContain(`sk_${path}`);
    k.expectB(
      await k.inject('POST', '/v1/gateway/providers', k.key(a), { name: 'x', rail: 'y', url: provider.url }),
      403,
      'authorization_error',
    );
    k.expectB(
      await k.inject('POST', '/v1/gateway/providers', asUser(a), {
        name: 'x',
        rail: 'card',
        url: provider.url,
      }),
      409,
      'provider_rail_taken',
    );
    k.expectB(
      await k.inject('POST', '/v1/gateway/providers', asUser(a), {
        name: 'x',
        rail: 'ledger',
        url: provider.url,
      }),
      400,
      'invalid_request',
    );
    const guarded = k.expectB(
      await k.inject('POST', '/v1/gateway/providers', asUser(a), {
        name: 'x',
        rail: 'z',
        url: 'http://169.254.169.254/pay',
      }),
      400,
      'invalid_request',
    );
    expect(guarded['param']).toBe('url');
    k.expectB(
      await k.inject('POST', '/v1/gateway/providers', asUser(a), {
        name: 'x',
        rail: 'z',
        url: provider.url,
        credentials: { 'idempotency-key': 'mine' },
      }),
      400,
      'invalid_request',
    );
    // A name that is no header name was stored, its value unchecked, and sent with every payment.
    for (const credentials of [{ 'bad header': 'v' }, { 'bad header': 5 }]) {
      const bad = k.expectB(
        await k.inject('POST', '/v1/gateway/providers', asUser(a), {
          name: 'x',
          rail: 'z',
          url: provider.url,
          credentials,
        }),
        400,
        'invalid_request',
      );
      expect(bad['message']).toContain('at /bad header: is not an allowed name');
    }
    // Another organization neither sees nor changes it.
    k.expectB(await k.inject('GET', `/v1/gateway/providers/${conn.id}`, k.key(b)), 404, 'provider_not_found');
    k.expectB(
      await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(b), { enabled: false }),
      404,
      'provider_not_found',
    );
    expect(k.ok(await k.inject('GET', '/v1/gateway/providers', k.key(b))).data).toEqual([]);
    expect(
      k.ok(await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(a), { timeout_ms: 3000 }))
        .timeout_ms,
    ).toBe(3000);
  });

  it('keep credentials from following the address to another origin', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'card', 'ok');
    const moved = k.expectB(
      await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), {
        url: 'http://127.0.0.2:9/steal',
      }),
      400,
      'invalid_request',
    );
    expect(moved['param']).toBe('credentials');
    // Nothing changed: the next payment still goes to the provider, with its credentials.
    expect(k.ok(await k.inject('GET', `/v1/gateway/providers/${conn.id}`, asUser(x))).url).toBe(conn.url);
    // The same origin keeps them; another origin with the credentials sent again (or null) is fine.
    const samePlace = `${new URL(conn.url).origin}/other-${path}`;
    k.ok(await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), { url: samePlace }));
    const cleared = k.ok(
      await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), {
        url: 'http://127.0.0.2:9/elsewhere',
        credentials: null,
      }),
    );
    expect(cleared.credentials).toMatchObject({ configured: false });
  });

  it('move the url only over the credentials checked: credentials stored meanwhile stay put', async () => {
    const x = await createTenant(t);
    const { conn } = await setup(x, 'wire', 'ok');
    const repo = createProviderRepository(t.store.db);
    const before = (await repo.get(x.orgId, conn.id))!;
    // Someone stores other credentials between the check of a url move and its write.
    expect(await repo.update(x.orgId, conn.id, { credentials: 'sealed-by-someone-else' })).toBe(true);
    expect(await repo.update(x.orgId, conn.id, { url: 'http://127.0.0.2:9/steal' }, before)).toBe(false);
    expect((await repo.get(x.orgId, conn.id))!.url).toBe(before.url);
  });

  it('answer provider_not_found to an update whose connection is deleted while it is in flight', async () => {
    const x = await createTenant(t);
    const caller = { organizationId: x.orgId, principal: { kind: 'user' as const, userId: x.userId } };
    // A service whose store deletes the connection (or changes its credentials) once its
    // `after`-th statement has run.
    const racing = (after: number, meanwhile: 'delete' | 'change' = 'delete') => {
      let n = 0;
      let id = '';
      const plugin: KyselyPlugin = {
        transformQuery: (args) => args.node as RootOperationNode,
        async transformResult(args) {
          if (++n !== after) return args.result;
          // The statement still holds its connection here: SQLite has one, so go around Kysely.
          const sqlite = t.store.sqlite;
          const repo = createProviderRepository(t.store.db);
          if (meanwhile === 'change') {
            if (sqlite)
              sqlite.prepare('UPDATE gateway_providers SET credentials = ? WHERE id = ?').run('other', id);
            else await repo.update(x.orgId, id, { credentials: 'other' });
          } else if (sqlite) sqlite.prepare('DELETE FROM gateway_providers WHERE id = ?').run(id);
          else await repo.remove(x.orgId, id);
          return args.result;
        },
      };
      const store = t.store.db.withPlugin(plugin);
      const service = createProviderService({
        store,
        clock,
        credentialsKey: KEY,
        allowPrivate: true,
        // Statements counted in order: the write runs on the same store, without the ledger lock.
        locked: (_org, fn) => fn(store),
      });
      return {
        update: async (input: Parameters<typeof service.update>[2]) => {
          id = (await setup(x, `race-${++entitySeq}`, 'ok')).conn.id;
          return service.update(caller, id, input).catch((e: unknown) => e);
        },
      };
    };
    const expectNotFound = (err: unknown) => {
      expect(err).toBeInstanceOf(GatewayError);
      expect(err).toMatchObject({ status: 404, body: { code: 'provider_not_found' } });
    };
    // Deleted between the read and the write: of a plain change, of a url move (it vanished, not changed).
    expectNotFound(await racing(1).update({ enabled: false }));
    const samePlace = `${new URL(provider.url).origin}/moved`;
    expectNotFound(await racing(1).update({ url: samePlace }));
    // Deleted between the write and the read of the answer.
    expectNotFound(await racing(2).update({ enabled: false }));
    // Changed rather than deleted under a url move: refused as before, the connection still there.
    expect(await racing(1, 'change').update({ url: samePlace })).toMatchObject({
      status: 400,
      body: { code: 'invalid_request', param: 'credentials' },
    });
  });

  it('seal credentials so they open only with their key and for their own connection', () => {
    const sealed = sealCredentials(KEY, 'org-1/conn-1', { authorization: 'Bearer sk_1' });
    expect(sealed).not.toContain('sk_1');
    expect(openCredentials(KEY, 'org-1/conn-1', sealed)).toEqual({ authorization: 'Bearer sk_1' });
    expect(() => openCredentials(KEY, 'org-2/conn-1', sealed)).toThrow();
    expect(() => openCredentials(randomBytes(32), 'org-1/conn-1', sealed)).toThrow();
  });

  it('refuse credentials when the operator set no key', async () => {
    await withTestApp({}, {}, async (bare) => {
      const x = await createTenant(bare);
      const res = await bare.inject({
        method: 'POST',
        url: '/v1/gateway/providers',
        headers: asUser(x),
        payload: { name: 'p', rail: 'card', url: provider.url, credentials: { authorization: 'Bearer s' } },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json().error.code).toBe('credentials_key_missing');
    });
  });
});

describe('consume hands the payment to the rail provider', () => {
  it('2xx: posts once with its own idempotency key and credentials, answers the provider reference', async () => {
    const { conn, path } = await setup(a, 'wire', 'ok');
    const c = await capsuleFor(a, 'wire');
    const res = k.ok(await pay(a, c.capsule, 'wire'));
    expect(res.status).toBe('consumed');
    const sent = provider.requests.filter((r) => r.path === `/${path}`);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.authorization).toBe(`Bearer sk_${path}`);
    expect(sent[0]!.idempotencyKey).toBe(`capsule-${c.id}-1`);
    expect(sent[0]!.body).toMatchObject({ capsule_id: c.id, amount: '100', currency: 'USD', rail: 'wire' });
    expect(res.consumption.payment).toEqual({
      rail: 'wire',
      provider_id: conn.id,
      reference: provider.payments.get(`capsule-${c.id}-1`),
      state: 'succeeded',
      attempts: 1,
    });
    expect(await ledgerCommits(a.orgId, c.id)).toBe(1);
    k.expectB(await pay(a, c.capsule, 'wire'), 409, 'capsule_consumed');
    expect(provider.requests.filter((r) => r.path === `/${path}`)).toHaveLength(1);
  });

  it('2xx with a reference the stores cannot hold as sent: commits it escaped', async () => {
    const x = await createTenant(t);
    await setup(x, 'wire', 'ok');
    const c = await capsuleFor(x, 'wire');
    provider.nextReference = 'ref-\u0000-\ud800-x';
    const res = k.ok(await pay(x, c.capsule, 'wire'));
    expect(res.status).toBe('consumed');
    expect(res.consumption.payment).toMatchObject({ reference: 'ref-\\u0000-\\ud800-x', state: 'succeeded' });
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
  });

  it('2xx with a reference of 200 characters outside the BMP: a payment, as one of 200 ASCII characters', async () => {
    const x = await createTenant(t);
    await setup(x, 'wire', 'ok');
    const c = await capsuleFor(x, 'wire');
    const reference = '\u{1F4B3}'.repeat(200);
    provider.nextReference = reference;
    const res = k.ok(await pay(x, c.capsule, 'wire'));
    expect(res.consumption.payment).toMatchObject({ reference, state: 'succeeded' });
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
    // One character more is no reference: the outcome stays unknown and nothing is committed.
    const d = await capsuleFor(x, 'wire');
    provider.nextReference = `${reference}x`;
    k.expectB(await pay(x, d.capsule, 'wire'), 502, 'provider_upstream_error');
    expect(await ledgerCommits(x.orgId, d.id)).toBe(0);
  });

  it('5xx whose body the stores cannot hold: 502 as any 5xx, and the retry goes through', async () => {
    const x = await createTenant(t);
    const { path } = await setup(x, 'wire', 'fail');
    const c = await capsuleFor(x, 'wire');
    provider.nextFailure = 'oops\u0000bad';
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    provider.modes.set(`/${path}`, 'ok');
    expect(k.ok(await pay(x, c.capsule, 'wire')).status).toBe('consumed');
  });

  it('5xx: 502 provider_upstream_error with the raw code; nothing consumed or counted; the retry reuses the key', async () => {
    const { path } = await setup(a, 'check', 'fail');
    const c = await capsuleFor(a, 'check');
    const err = k.expectB(await pay(a, c.capsule, 'check'), 502, 'provider_upstream_error');
    expect(String(err['message'])).toContain('HTTP 500');
    expect(k.ok(await k.inject('GET', `/v1/gateway/capsules/${c.id}`, k.key(a))).status).toBe('active');
    expect(await ledgerCommits(a.orgId, c.id)).toBe(0);
    // A retry of a payment of unknown outcome must be the same payment.
    k.expectB(await pay(a, c.capsule, 'check', '99'), 409, 'payment_attempt_mismatch');
    provider.modes.set(`/${path}`, 'ok');
    const done = k.ok(await pay(a, c.capsule, 'check'));
    const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
    expect(keys).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`]);
    expect(done.consumption.payment).toMatchObject({ state: 'succeeded', attempts: 2 });
    expect(await ledgerCommits(a.orgId, c.id)).toBe(1);
  });

  it('4xx: a certain refusal frees the capsule, and the next attempt gets a new key', async () => {
    const { path } = await setup(a, 'ach', 'refuse');
    const c = await capsuleFor(a, 'ach');
    const err = k.expectB(await pay(a, c.capsule, 'ach'), 502, 'provider_upstream_error');
    expect(String(err['message'])).toContain('HTTP 402');
    expect(await ledgerCommits(a.orgId, c.id)).toBe(0);
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(a, c.capsule, 'ach', '60'));
    const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
    expect(keys).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-2`]);
  });

  it('429: provider_rate_limited passing Retry-After; the Idempotency-Key of the request is freed', async () => {
    const { path } = await setup(a, 'busy', 'limited');
    const c = await capsuleFor(a, 'busy');
    const body = { capsule: c.capsule, amount: '100', currency: 'USD', rail: 'busy', beneficiary: PAYEE };
    const headers = { ...k.key(a), 'idempotency-key': `retry-${c.id}` };
    const res = await k.inject('POST', '/v1/gateway/capsules/consume', headers, body);
    k.expectB(res, 429, 'provider_rate_limited');
    expect(res.headers['retry-after']).toBe('7');
    provider.modes.set(`/${path}`, 'ok');
    const again = await k.inject('POST', '/v1/gateway/capsules/consume', headers, body);
    expect(k.ok(again).status).toBe('consumed');
  });

  it('never answers: 504 provider_timeout, the capsule stays usable', async () => {
    const { path } = await setup(a, 'slow', 'never', 200);
    const c = await capsuleFor(a, 'slow');
    k.expectB(await pay(a, c.capsule, 'slow'), 504, 'provider_timeout');
    expect(k.ok(await k.inject('GET', `/v1/gateway/capsules/${c.id}`, k.key(a))).status).toBe('active');
    expect(await ledgerCommits(a.orgId, c.id)).toBe(0);
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(a, c.capsule, 'slow'));
  });

  it('a payment of unknown outcome counts against entity caps, and holds its invoice and workflow', async () => {
    const { path } = await setup(a, 'cheque', 'fail');
    const packId = await k.pack(a, { ...PACK, allowed_rails: ['cheque'], entity_caps: { usd_24h: '150' } });
    const payee = await k.payee(a, PAYEE);
    k.ok(
      await k.inject('POST', '/v1/gateway/workflows', k.key(a), { entity_id: 'capped', workflow_id: 'w1' }),
      201,
    );
    k.ok(await k.inject('POST', '/v1/gateway/workflows/capped/w1/transition', asUser(a), { to: 'approved' }));
    const mint = (workflow?: string) =>
      k.mint(a, {
        entity_id: 'capped',
        pack_id: packId,
        rails: ['cheque'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '100' },
        ...(workflow ? { workflow_id: workflow } : {}),
      });
    const first = k.ok(await mint('w1'), 201);
    const second = k.ok(await mint(), 201);
    k.expectB(await pay(a, first.capsule, 'cheque'), 502, 'provider_upstream_error');
    // 100 may have been paid: another 100 would take the entity over its 150.
    k.expectB(await pay(a, second.capsule, 'cheque'), 403, 'amount_exceeds_entity_cap');
    // The workflow stays with the capsule whose payment is unresolved.
    const held = k.ok(await k.inject('GET', '/v1/gateway/workflows/capped/w1', k.key(a)));
    expect(held).toMatchObject({ state: 'approved', capsule_id: first.id });
    k.expectB(
      await k.inject('POST', '/v1/gateway/workflows/capped/w1/transition', asUser(a), { to: 'cancelled' }),
      409,
      'workflow_invalid_transition',
    );
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(a, first.capsule, 'cheque'));
    expect(k.ok(await k.inject('GET', '/v1/gateway/workflows/capped/w1', k.key(a))).state).toBe('consumed');
  });

  it('the ledger rail settles internally without a provider', async () => {
    const c = await capsuleFor(a, 'ledger', '30');
    const res = k.ok(await pay(a, c.capsule, 'ledger', '30'));
    expect(res.consumption.payment).toMatchObject({
      rail: 'ledger',
      provider_id: null,
      state: 'settled',
      reference: `ledger:${res.consumption.ledger_entry_id}`,
    });
  });
});

async function paymentRow(org: string, capsuleId: string) {
  return (await t.store.db
    .selectFrom('gateway_payments' as never)
    .selectAll()
    .where('organization_id' as never, '=', org as never)
    .where('capsule_id' as never, '=', capsuleId as never)
    .executeTakeFirst()) as { state: string; idempotency_key: string; attempts: number } | undefined;
}

/** Seals the connection's credentials under another key: they no longer open, nothing is sent. */
async function breakCredentials(providerId: string) {
  await t.store.db
    .updateTable('gateway_providers' as never)
    .set({ credentials: sealCredentials(randomBytes(32), 'x/y', { authorization: 'z' }) } as never)
    .where('id' as never, '=', providerId as never)
    .execute();
}

describe('a hand-off that sends nothing, or a refusal of a key sent before', () => {
  it('credentials that do not open leave a payment of unknown outcome as it was, with its key', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'wire', 'fail');
    const c = await capsuleFor(x, 'wire');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    expect(await paymentRow(x.orgId, c.id)).toMatchObject({ state: 'unknown', attempts: 1 });
    await breakCredentials(conn.id);
    const err = k.expectB(await pay(x, c.capsule, 'wire'), 503, 'credentials_key_missing');
    expect(String(err['message'])).toContain('do not open');
    expect(await paymentRow(x.orgId, c.id)).toMatchObject({
      state: 'unknown',
      attempts: 1,
      idempotency_key: `capsule-${c.id}-1`,
    });
    k.ok(
      await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), {
        credentials: { authorization: `Bearer sk_${path}` },
      }),
    );
    provider.modes.set(`/${path}`, 'ok');
    const done = k.ok(await pay(x, c.capsule, 'wire'));
    const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
    expect(keys).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`]);
    expect(done.consumption.payment).toMatchObject({ state: 'succeeded', attempts: 2 });
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
  });

  it('nothing sent on a first attempt leaves no payment row; the next attempt sends the first key', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'wire', 'ok');
    const c = await capsuleFor(x, 'wire');
    await breakCredentials(conn.id);
    k.expectB(await pay(x, c.capsule, 'wire'), 503, 'credentials_key_missing');
    expect(await paymentRow(x.orgId, c.id)).toBeUndefined();
    k.ok(
      await k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), {
        credentials: { authorization: `Bearer sk_${path}` },
      }),
    );
    k.ok(await pay(x, c.capsule, 'wire'));
    const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
    expect(keys).toEqual([`capsule-${c.id}-1`]);
  });

  it('a refusal of a key the provider saw before keeps the payment unknown and the key', async () => {
    const x = await createTenant(t);
    const { path } = await setup(x, 'wire', 'fail');
    const c = await capsuleFor(x, 'wire');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    provider.modes.set(`/${path}`, 'refuse');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    expect(await paymentRow(x.orgId, c.id)).toMatchObject({ state: 'unknown' });
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(x, c.capsule, 'wire'));
    const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
    expect(keys).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`, `capsule-${c.id}-1`]);
  });
});

/** A tenant with a wire provider answering `outcome`, a workflow `w` of `entity` approved, and a capsule bound to it. */
async function approvedWorkflowCapsule(
  entity: string,
  outcome: Parameters<TestPaymentProvider['endpoint']>[1],
) {
  const x = await createTenant(t);
  const { path } = await setup(x, 'wire', outcome);
  const packId = await k.pack(x, PACK);
  const payee = await k.payee(x, PAYEE);
  k.ok(
    await k.inject('POST', '/v1/gateway/workflows', k.key(x), { entity_id: entity, workflow_id: 'w' }),
    201,
  );
  k.ok(await k.inject('POST', `/v1/gateway/workflows/${entity}/w/transition`, asUser(x), { to: 'approved' }));
  const c = k.ok(
    await k.mint(x, {
      entity_id: entity,
      pack_id: packId,
      rails: ['wire'],
      beneficiary: { payee_id: payee.id },
      amount_ceiling: { currency: 'USD', amount: '100' },
      workflow_id: 'w',
    }),
    201,
  );
  return { x, path, c };
}

describe('an attempt whose lease ran out while it was in flight', () => {
  it('changes nothing when it ends after another consume took the payment over', async () => {
    const { x, path, c } = await approvedWorkflowCapsule('lease', 'refuse');
    let takeover: Awaited<ReturnType<typeof pay>> | null = null;
    provider.beforeAnswer = async (req) => {
      if (req.path !== `/${path}`) return;
      provider.beforeAnswer = null;
      // The first attempt's lease runs out; another consume takes the payment over and pays.
      offset = 120_000;
      provider.modes.set(`/${path}`, 'ok');
      takeover = await pay(x, c.capsule, 'wire');
    };
    try {
      // The first attempt is then refused: too late, the payment is no longer its own.
      k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    } finally {
      provider.beforeAnswer = null;
      offset = 0;
    }
    expect(k.ok(takeover!).status).toBe('consumed');
    expect(await paymentRow(x.orgId, c.id)).toMatchObject({ state: 'succeeded' });
    const wf = k.ok(await k.inject('GET', '/v1/gateway/workflows/lease/w', k.key(x)));
    expect(wf).toMatchObject({ state: 'consumed', capsule_id: c.id });
  });
});

describe('a payment of unknown outcome', () => {
  it('is retried with its key even after its capsule expired and its pack and payee changed', async () => {
    const x = await createTenant(t);
    const { path } = await setup(x, 'wire', 'fail');
    const packId = await k.pack(x, PACK);
    const payee = await k.payee(x, PAYEE);
    const c = k.ok(
      await k.mint(x, {
        entity_id: 'strand',
        pack_id: packId,
        rails: ['wire'],
        beneficiary: { payee_id: payee.id },
        amount_ceiling: { currency: 'USD', amount: '100' },
      }),
      201,
    );
    const other = await capsuleFor(x, 'wire');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    // Everything a new payment is checked against changes; the one in doubt must still be asked for.
    k.ok(
      await k.inject('PUT', `/v1/gateway/packs/${packId}`, asUser(x), { ...PACK, allowed_rails: ['ach'] }),
      201,
    );
    k.ok(await k.inject('POST', `/v1/gateway/payees/${payee.id}/hold`, k.key(x)));
    provider.modes.set(`/${path}`, 'ok');
    offset = 3_600_000;
    try {
      const done = k.ok(await pay(x, c.capsule, 'wire'));
      expect(done.consumption.payment).toMatchObject({ state: 'succeeded', attempts: 2 });
      const keys = provider.requests.filter((r) => r.path === `/${path}`).map((r) => r.idempotencyKey);
      expect(keys).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`]);
      expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
      // A capsule without a payment in doubt still expires.
      k.expectB(await pay(x, other.capsule, 'wire'), 403, 'capsule_expired');
    } finally {
      offset = 0;
    }
  });

  it('keeps its capsule from being revoked and its provider from being deleted', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'wire', 'never', 200);
    const c = await capsuleFor(x, 'wire');
    k.expectB(await pay(x, c.capsule, 'wire'), 504, 'provider_timeout');
    k.expectB(
      await k.inject('POST', `/v1/gateway/capsules/${c.id}/revoke`, k.key(x)),
      409,
      'payment_unresolved',
    );
    // A person cannot revoke it either: the provider may have paid, and only a consume records that.
    k.expectB(
      await k.inject('POST', `/v1/gateway/capsules/${c.id}/revoke`, asUser(x)),
      409,
      'payment_unresolved',
    );
    k.expectB(
      await k.inject('DELETE', `/v1/gateway/providers/${conn.id}`, asUser(x)),
      409,
      'payment_unresolved',
    );
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(x, c.capsule, 'wire'));
    const gone = await k.inject('DELETE', `/v1/gateway/providers/${conn.id}`, asUser(x));
    expect(gone.statusCode).toBe(204);
    k.expectB(
      await k.inject('DELETE', `/v1/gateway/providers/${conn.id}`, asUser(x)),
      404,
      'provider_not_found',
    );
  });
});

describe('the connection of a payment of unknown outcome', () => {
  it('keeps its url and credential header names until the payment is resolved: the retry reaches the same endpoint', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'wire', 'fail');
    const c = await capsuleFor(x, 'wire');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    const change = (body: Record<string, unknown>) =>
      k.inject('PATCH', `/v1/gateway/providers/${conn.id}`, asUser(x), body);
    // An endpoint that never saw the payment's Idempotency-Key would pay it again.
    const elsewhere = provider.endpoint(`${path}-elsewhere`, 'ok');
    const moved = k.expectB(await change({ url: elsewhere }), 409, 'payment_unresolved');
    expect(moved['param']).toBe('url');
    k.expectB(
      await change({ url: elsewhere, credentials: { authorization: 'Bearer sk_other' } }),
      409,
      'payment_unresolved',
    );
    // Header names may select the account a key belongs to: adding, dropping or renaming them waits too.
    const renamed = k.expectB(
      await change({ credentials: { authorization: `Bearer sk_${path}`, 'x-account': 'other' } }),
      409,
      'payment_unresolved',
    );
    expect(renamed['param']).toBe('credentials');
    k.expectB(await change({ credentials: null }), 409, 'payment_unresolved');
    // What does not decide where or how the retry goes still changes: a rotated secret under the
    // same header, the name, the timeout, the url it already has.
    const kept = k.ok(
      await change({
        credentials: { authorization: `Bearer sk_${path}` },
        name: 'renamed',
        timeout_ms: 3000,
        url: conn.url,
      }),
    );
    expect(kept).toMatchObject({ name: 'renamed', url: conn.url, timeout_ms: 3000 });
    provider.modes.set(`/${path}`, 'ok');
    k.ok(await pay(x, c.capsule, 'wire'));
    const sent = (p: string) => provider.requests.filter((r) => r.path === `/${p}`);
    expect(sent(path).map((r) => r.idempotencyKey)).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`]);
    expect(sent(`${path}-elsewhere`)).toEqual([]);
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
    // Resolved: the connection may move now.
    expect(k.ok(await change({ url: elsewhere })).url).toBe(elsewhere);
  });

  it('is never changed between a consume reading it and the payment being recorded', async () => {
    const x = await createTenant(t);
    const { conn, path } = await setup(x, 'wire', 'ok');
    const c = await capsuleFor(x, 'wire');
    const ledger = createSpendLedger(t.store);
    const url = `/v1/gateway/providers/${conn.id}`;
    let changes: Promise<Awaited<ReturnType<typeof k.inject>>[]> | undefined;
    // The consume's first step, as prepareConsume and startAttempt run it under the spend-ledger lock:
    // the rail's connection is read, then the payment is recorded as pending (and then sent there).
    await ledger.locked(
      x.orgId,
      () => new Date().toISOString(),
      async (tx) => {
        const route = await routeOf(tx.db, x.orgId, 'wire');
        if (route.kind !== 'provider') throw new Error('the rail has no provider');
        changes = Promise.all([
          k.inject('PATCH', url, asUser(x), { url: provider.endpoint(`${path}-moved`, 'ok') }),
          k.inject('DELETE', url, asUser(x)),
        ]);
        // A change that does not wait for the lock lands here; one that waits, after the commit.
        await Promise.race([changes, new Promise((r) => setTimeout(r, 500))]);
        await createPaymentRepository(tx.db).insert({
          organization_id: x.orgId,
          capsule_id: c.id,
          entity_id: c.entity,
          provider_id: route.provider.id,
          rail: 'wire',
          amount_micros: 100_000_000,
          request: '{}',
          idempotency_key: `capsule-${c.id}-1`,
          state: 'pending',
          attempts: 1,
          lease_until: new Date(Date.now() + 60_000).toISOString(),
          reference: null,
          last_error: null,
          created_at: tx.now,
          updated_at: tx.now,
        });
      },
    );
    const [patched, removed] = await changes!;
    k.expectB(patched!, 409, 'payment_unresolved');
    k.expectB(removed!, 409, 'payment_unresolved');
    expect(k.ok(await k.inject('GET', url, asUser(x))).url).toBe(conn.url);
  });
});

describe('a workflow bound to a capsule whose payment is with the provider', () => {
  it('is not cancelled by a transition that read it before the consume held it', async () => {
    const { x, path, c } = await approvedWorkflowCapsule('race', 'ok');
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let reached!: () => void;
    const withProvider = new Promise<void>((r) => {
      reached = r;
    });
    provider.beforeAnswer = async (req) => {
      if (req.path !== `/${path}`) return;
      reached();
      await gate;
    };
    let consume: ReturnType<typeof pay> | undefined;
    let statements = 0;
    // The transition runs on a second connection: once it has read the workflow (approved, no
    // capsule), a consume holds it and hands its payment to the provider; then the transition writes.
    const plugin: KyselyPlugin = {
      transformQuery: (args) => args.node as RootOperationNode,
      async transformResult(args) {
        if (++statements === 1) {
          consume = pay(x, c.capsule, 'wire');
          await withProvider;
        }
        return args.result;
      },
    };
    const second = openStore(t.config.databaseUrl);
    try {
      const workflows = createWorkflowService({
        store: second.db.withPlugin(plugin),
        clock,
        packContent: async () => {
          throw new Error('unused');
        },
      });
      const scope = {
        organizationId: x.orgId,
        projectId: null,
        principal: { kind: 'user' as const, userId: x.userId },
      };
      const refused = await workflows.transition(scope, 'race', 'w', { to: 'cancelled' }).catch((e) => e);
      expect(refused).toBeInstanceOf(GatewayError);
      expect(refused).toMatchObject({ status: 409, body: { code: 'workflow_invalid_transition' } });
    } finally {
      release();
      provider.beforeAnswer = null;
      await second.close();
    }
    // The provider paid: the consume commits, and the workflow moves on as for any consume.
    expect(k.ok(await consume!).status).toBe('consumed');
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
    const wf = k.ok(await k.inject('GET', '/v1/gateway/workflows/race/w', k.key(x)));
    expect(wf).toMatchObject({ state: 'consumed', capsule_id: c.id });
  });

  it('does not stop a retry of that payment, whatever state the workflow reached', async () => {
    const { x, path, c } = await approvedWorkflowCapsule('left', 'fail');
    k.expectB(await pay(x, c.capsule, 'wire'), 502, 'provider_upstream_error');
    // The workflow left approved while the payment was unresolved (as a transition racing the
    // consume could before it compared the capsule binding).
    await t.store.db
      .updateTable('gateway_workflows' as never)
      .set({ state: 'cancelled' } as never)
      .where('organization_id' as never, '=', x.orgId as never)
      .where('workflow_id' as never, '=', 'w' as never)
      .execute();
    provider.modes.set(`/${path}`, 'ok');
    // The retry only asks for the payment already sent; it succeeds, so it is recorded.
    const done = k.ok(await pay(x, c.capsule, 'wire'));
    expect(done).toMatchObject({
      status: 'consumed',
      consumption: { payment: { state: 'succeeded', attempts: 2 } },
    });
    expect(done.receipt_id).toEqual(expect.any(String));
    expect(await ledgerCommits(x.orgId, c.id)).toBe(1);
    expect(await paymentRow(x.orgId, c.id)).toMatchObject({ state: 'succeeded' });
    // The workflow keeps the state a person chose; its history says the payment succeeded.
    const wf = k.ok(await k.inject('GET', '/v1/gateway/workflows/left/w', k.key(x)));
    expect(wf.state).toBe('cancelled');
    expect(wf.history.at(-1)).toMatchObject({ from: 'cancelled', to: 'cancelled', by: `capsule:${c.id}` });
  });
});

describe('a service stopped between the provider answer and the commit', () => {
  it('leaves the payment pending; a later consume re-sends the same key and commits it once', async () => {
    const database = await freshDatabase();
    let shift = 0;
    const shared = { now: () => new Date(Date.now() + shift) };
    const one = await createTestApp({ providerCredentialsKey: KEY }, { database, clock: shared });
    const two = await createTestApp({ providerCredentialsKey: KEY }, { database, clock: shared });
    const kOne = gatewayKit(one);
    const kTwo = gatewayKit(two);
    try {
      const x = await createTenant(one);
      const path = `crash-${++entitySeq}`;
      kOne.ok(
        await kOne.inject('POST', '/v1/gateway/providers', asUser(x), {
          name: 'psp',
          rail: 'wire',
          url: provider.endpoint(path, 'ok'),
          timeout_ms: 5000,
        }),
        201,
      );
      const packId = await kOne.pack(x, PACK);
      const payee = await kOne.payee(x, PAYEE);
      const c = kOne.ok(
        await kOne.mint(x, {
          entity_id: 'crash',
          pack_id: packId,
          rails: ['wire'],
          beneficiary: { payee_id: payee.id },
          amount_ceiling: { currency: 'USD', amount: '100' },
        }),
        201,
      );
      // The provider pays; the first instance loses its store before the answer arrives.
      provider.beforeAnswer = async (req) => {
        if (req.path === `/${path}`) {
          provider.beforeAnswer = null;
          // As if the process died: its store is gone before it could record the answer.
          await one.store.close();
        }
      };
      const body = { capsule: c.capsule, amount: '100', currency: 'USD', rail: 'wire', beneficiary: PAYEE };
      const first = await kOne
        .inject('POST', '/v1/gateway/capsules/consume', kOne.key(x), body)
        .catch((e) => e);
      expect(first?.statusCode).not.toBe(200);
      expect(provider.payments.size).toBeGreaterThan(0);
      // While the attempt's lease runs, another consume waits rather than paying again.
      const waiting = await kTwo.inject('POST', '/v1/gateway/capsules/consume', kTwo.key(x), body);
      kTwo.expectB(waiting, 409, 'payment_in_progress');
      expect(Number(waiting.headers['retry-after'])).toBeGreaterThan(0);
      shift = 60_000;
      const done = kTwo.ok(await kTwo.inject('POST', '/v1/gateway/capsules/consume', kTwo.key(x), body));
      const sent = provider.requests.filter((r) => r.path === `/${path}`);
      expect(sent.map((r) => r.idempotencyKey)).toEqual([`capsule-${c.id}-1`, `capsule-${c.id}-1`]);
      expect(done.consumption.payment.reference).toBe(provider.payments.get(`capsule-${c.id}-1`));
      const commits = await two.store.db
        .selectFrom('spend_ledger')
        .select(['id'])
        .where('organization_id', '=', x.orgId)
        .where('action_id', '=', `capsule:${c.id}`)
        .execute();
      expect(commits).toHaveLength(1);
    } finally {
      provider.beforeAnswer = null;
      await one.app.close().catch(() => undefined);
      await two.close();
      await database.drop();
    }
  });
});
