import { beneficiaryHash, CAPSULE_PAYLOAD_SCHEMA, capsuleSigningInput, compactCapsule } from '@svc/capsules';
import { beforeAll, describe, expect, it } from 'vitest';
import { setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { GatewayTables } from './model.js';
import { createGatewayRepository } from './repository.js';

let a: Tenant;
let b: Tenant;
let offset = 0;
const clock = { now: () => new Date(Date.now() + offset) };

const PAYEE = { name: '  ACME   Supplies ', account_number: 'de89 3704-0044 0532 0130 00', country: 'de' };
const PACK = {
  entity_caps: { usd_24h: '1000.00', usd_7d: '5000', usd_30d: null },
  allowed_rails: ['ach', 'usdc'],
  quarantine_seconds: 3600,
  max_ttl_seconds: 600,
  conditions: [{ name: 'not_huge', expression: 'payment.amount <= 900.0' }],
};

const t = useTestApp({}, { clock });
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
});

const key = (x: Tenant) => keyHeader(x.apiKey);
const inject = (
  method: 'GET' | 'POST' | 'PUT',
  url: string,
  headers: Record<string, string>,
  payload?: unknown,
) => t.inject({ method, url, headers, ...(payload !== undefined ? { payload: payload as object } : {}) });

/** The envelope-B error of an answer, checked for its status and code. */
function expectB(res: { statusCode: number; json(): unknown; body: string }, status: number, code: string) {
  const err = (res.json() as { error?: Record<string, unknown> }).error;
  if (res.statusCode !== status || err?.['code'] !== code) {
    throw new Error(`expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  }
  expect(err['doc_url']).toBe(`${t.config.docsUrl}/errors/${code}`);
  expect(typeof err['request_id']).toBe('string');
  expect(typeof err['type']).toBe('string');
  return err;
}

let packSeq = 0;
async function pack(x: Tenant, body: object = PACK) {
  const id = `pack-${++packSeq}`;
  const res = await inject('PUT', `/v1/gateway/packs/${id}`, asUser(x), body);
  expect(res.statusCode).toBe(201);
  return id;
}

async function payee(x: Tenant, details: object, lift = true) {
  const res = await inject('POST', '/v1/gateway/payees', key(x), { details });
  expect([200, 201]).toContain(res.statusCode);
  const p = res.json();
  if (lift)
    expect((await inject('POST', `/v1/gateway/payees/${p.id}/lift-quarantine`, asUser(x))).statusCode).toBe(
      200,
    );
  return p as { id: string; beneficiary_hash: string };
}

let entitySeq = 0;
async function mint(x: Tenant, packId: string, over: Record<string, unknown> = {}) {
  const res = await inject('POST', '/v1/gateway/capsules', key(x), {
    entity_id: `entity-${++entitySeq}`,
    agent_id: 'agent-1',
    pack_id: packId,
    rails: ['ach'],
    beneficiary: { details: PAYEE },
    amount_ceiling: { currency: 'USD', amount: '500.00' },
    ttl_seconds: 300,
    ...over,
  });
  return res;
}

const consume = (x: Tenant, capsule: string, over: Record<string, unknown> = {}) =>
  inject('POST', '/v1/gateway/capsules/consume', key(x), {
    capsule,
    amount: '120.50',
    currency: 'USD',
    rail: 'ach',
    beneficiary: PAYEE,
    ...over,
  });

describe('gateway envelope B', () => {
  it('answers unknown routes, bad JSON, oversized bodies and bad fields in envelope B', async () => {
    expectB(await inject('GET', '/v1/gateway/nothing-here', key(a)), 404, 'route_not_found');
    const bad = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: { ...key(a), 'content-type': 'application/json' },
      payload: '{"entity_id":',
    });
    expectB(bad, 400, 'invalid_json');
    const big = await t.inject({
      method: 'POST',
      url: '/v1/gateway/payees',
      headers: { ...key(a), 'content-type': 'application/json' },
      payload: JSON.stringify({ details: { name: 'x'.repeat(600 * 1024) } }),
    });
    expectB(big, 413, 'payload_too_large');
    const missing = expectB(
      await inject('POST', '/v1/gateway/capsules', key(a), { agent_id: 'x' }),
      400,
      'invalid_request',
    );
    expect(missing['param']).toBeTruthy();
    const capsuleBody = expectB(
      await inject('POST', '/v1/gateway/capsules/consume', key(a), { capsule: 'x', amount: 1 }),
      400,
      'capsule_payload_invalid',
    );
    expect(capsuleBody['param']).toBeTruthy();
    expectB(await inject('GET', '/v1/gateway/packs/p1', {}), 401, 'unauthorized');
  });

  it('publishes the capsule payload schema without authentication', async () => {
    const res = await inject('GET', '/v1/gateway/schemas/capsule.json', {});
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual(JSON.parse(JSON.stringify(CAPSULE_PAYLOAD_SCHEMA)));
  });
});

describe('policy packs', () => {
  it('versions each PUT, hashes the canonical content, and reads any version', async () => {
    const first = await inject('PUT', '/v1/gateway/packs/ops', asUser(a), PACK);
    expect(first.statusCode).toBe(201);
    expect(first.json()).toMatchObject({ pack_id: 'ops', version: 1, allowed_rails: ['ach', 'usdc'] });
    expect(first.json().sha256).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The same content in another order hashes the same.
    const again = await inject('PUT', '/v1/gateway/packs/ops', asUser(a), {
      ...PACK,
      allowed_rails: ['usdc', 'ach'],
    });
    expect(again.json()).toMatchObject({ version: 2, sha256: first.json().sha256 });
    const changed = await inject('PUT', '/v1/gateway/packs/ops', asUser(a), { ...PACK, max_ttl_seconds: 60 });
    expect(changed.json().version).toBe(3);
    expect(changed.json().sha256).not.toBe(first.json().sha256);
    expect((await inject('GET', '/v1/gateway/packs/ops', key(a))).json().version).toBe(3);
    expect((await inject('GET', '/v1/gateway/packs/ops?version=1', key(a))).json().max_ttl_seconds).toBe(600);
    expectB(await inject('GET', '/v1/gateway/packs/ops?version=9', key(a)), 404, 'policy_pack_not_found');
    expectB(await inject('GET', '/v1/gateway/packs/nope', key(a)), 404, 'policy_pack_not_found');
  });

  it('saves every one of many concurrent PUTs of one pack, each as a version of its own', async () => {
    const saves = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        inject('PUT', '/v1/gateway/packs/busy', asUser(a), { ...PACK, max_ttl_seconds: 100 + i }),
      ),
    );
    expect(saves.map((r) => r.statusCode)).toEqual(saves.map(() => 201));
    const versions = saves.map((r) => r.json().version as number).sort((x, y) => x - y);
    expect(versions).toEqual(Array.from({ length: 24 }, (_, i) => i + 1));
  });

  it('compiles CEL conditions when saved: a bad expression answers 400 with its param', async () => {
    const bad = await inject('PUT', '/v1/gateway/packs/bad', asUser(a), {
      ...PACK,
      conditions: [{ name: 'x', expression: 'payment.amount <= ' }],
    });
    expect(expectB(bad, 400, 'invalid_request')['param']).toBe('conditions.0.expression');
    const unknown = await inject('PUT', '/v1/gateway/packs/bad', asUser(a), {
      ...PACK,
      conditions: [{ name: 'x', expression: 'payment.colour == "red"' }],
    });
    expect(expectB(unknown, 400, 'invalid_request')['param']).toBe('conditions.0.expression');
    const notBool = await inject('PUT', '/v1/gateway/packs/bad', asUser(a), {
      ...PACK,
      conditions: [{ name: 'x', expression: 'payment.amount + 1.0' }],
    });
    expectB(notBool, 400, 'invalid_request');
    expectB(await inject('GET', '/v1/gateway/packs/bad', key(a)), 404, 'policy_pack_not_found');
  });

  it('keeps packs per organization', async () => {
    await inject('PUT', '/v1/gateway/packs/mine', asUser(a), PACK);
    expectB(await inject('GET', '/v1/gateway/packs/mine', key(b)), 404, 'policy_pack_not_found');
    expectB(await inject('GET', '/v1/gateway/packs/mine', asUser(b)), 404, 'policy_pack_not_found');
    expect((await inject('GET', '/v1/gateway/packs/mine', asUser(a))).statusCode).toBe(200);
  });

  it('refuses a pack written with an API key: the agents a pack governs cannot loosen it', async () => {
    expectB(await inject('PUT', '/v1/gateway/packs/loose', key(a), PACK), 403, 'authorization_error');
    expectB(await inject('GET', '/v1/gateway/packs/loose', key(a)), 404, 'policy_pack_not_found');
  });
});

describe('payees', () => {
  it('registers a payee under the hash @svc/capsules computes, once', async () => {
    const first = await inject('POST', '/v1/gateway/payees', key(a), {
      details: { name: 'Zed Ltd', wallet_address: '0xABCDEF' },
    });
    expect(first.statusCode).toBe(201);
    expect(first.json().beneficiary_hash).toBe(
      await beneficiaryHash({ name: 'zed  ltd', wallet_address: '0xabcdef' }),
    );
    expect(first.json().details).toEqual({ name: 'zed ltd', wallet_address: '0xabcdef' });
    const same = await inject('POST', '/v1/gateway/payees', key(a), {
      details: { name: 'ZED LTD ', wallet_address: '0xabcdef' },
    });
    expect(same.statusCode).toBe(200);
    expect(same.json().id).toBe(first.json().id);
    expectB(
      await inject('POST', '/v1/gateway/payees', key(a), { details: { name: 'No account' } }),
      400,
      'invalid_request',
    );
  });

  it('holds by anyone, releases and lifts quarantine by a person only, per organization', async () => {
    const p = await payee(a, { name: 'Hold Me', account_number: '1' }, false);
    expect((await inject('POST', `/v1/gateway/payees/${p.id}/hold`, key(a))).json().held).toBe(true);
    expectB(await inject('POST', `/v1/gateway/payees/${p.id}/release`, key(a)), 403, 'authorization_error');
    expectB(
      await inject('POST', `/v1/gateway/payees/${p.id}/lift-quarantine`, key(a)),
      403,
      'authorization_error',
    );
    expect((await inject('POST', `/v1/gateway/payees/${p.id}/release`, asUser(a))).json().held).toBe(false);
    const lifted = await inject('POST', `/v1/gateway/payees/${p.id}/lift-quarantine`, asUser(a));
    expect(lifted.json().quarantine.lifted_by).toBe(a.userId);
    for (const path of ['', '/hold', '/release', '/lift-quarantine']) {
      const method = path === '' ? 'GET' : 'POST';
      expectB(
        await inject(
          method,
          `/v1/gateway/payees/${p.id}${path}`,
          path === '' || path === '/hold' ? key(b) : asUser(b),
        ),
        404,
        'beneficiary_not_found',
      );
    }
  });
});

describe('capsules', () => {
  it('mints a signed capsule that verifies, reads it and keeps it per organization', async () => {
    const packId = await pack(a);
    const res = await mint(a, packId, { ttl_seconds: 99_999 });
    expect(res.statusCode).toBe(201);
    const c = res.json();
    expect(c.status).toBe('active');
    expect(c.capsule.split('.')).toHaveLength(3);
    expect(c.payload).toMatchObject({
      version: 'svc.capsule/1',
      organization_id: a.orgId,
      pack_id: packId,
      pack_version: 1,
      rail_allowlist: ['ach'],
      beneficiary: await beneficiaryHash(PAYEE),
    });
    // ttl_seconds is capped by the pack's max_ttl_seconds.
    expect(Date.parse(c.payload.expires_at) - Date.parse(c.payload.issued_at)).toBe(600_000);
    expect((await inject('GET', `/v1/gateway/capsules/${c.id}`, key(a))).json().capsule).toBe(c.capsule);
    expectB(await inject('GET', `/v1/gateway/capsules/${c.id}`, key(b)), 404, 'capsule_not_found');
    expectB(await inject('POST', `/v1/gateway/capsules/${c.id}/revoke`, key(b)), 404, 'capsule_not_found');
    // Another project of the same organization sees nothing either; a person of the organization does.
    const sibling = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { authorization: `Bearer ${a.token}` },
      payload: { organizationId: a.orgId, name: 'Sibling' },
    });
    const siblingKey = { 'x-service-api-key': sibling.json().apiKey as string };
    expectB(await inject('GET', `/v1/gateway/capsules/${c.id}`, siblingKey), 404, 'capsule_not_found');
    expectB(
      await inject('POST', `/v1/gateway/capsules/${c.id}/revoke`, siblingKey),
      404,
      'capsule_not_found',
    );
    expect((await inject('GET', `/v1/gateway/capsules/${c.id}`, asUser(a))).statusCode).toBe(200);
    expectB(await consume(b, c.capsule), 400, 'capsule_payload_invalid');
  });

  it('refuses to mint outside the pack', async () => {
    const packId = await pack(a);
    expectB(await mint(a, 'missing-pack'), 404, 'policy_pack_not_found');
    expectB(await mint(a, packId, { pack_version: 7 }), 404, 'policy_pack_not_found');
    // Beyond what a version column holds: refused as a bad request, never looked up.
    for (const pack_version of [2 ** 31, 1e308]) {
      expect(expectB(await mint(a, packId, { pack_version }), 400, 'invalid_request')['param']).toBe(
        'pack_version',
      );
    }
    // Not a version either: too large, or not written as a plain integer (never read as version 1).
    for (const version of ['2147483648', '1e308', '1.5', '0']) {
      const res = await inject('GET', `/v1/gateway/packs/${packId}?version=${version}`, asUser(a));
      expect(expectB(res, 400, 'invalid_request')['param']).toBe('version');
    }
    expectB(await mint(a, packId, { rails: ['wire'] }), 403, 'rail_not_in_allowlist');
    expectB(
      await mint(a, packId, { amount_ceiling: { currency: 'USD', amount: '1.005' } }),
      400,
      'invalid_amount_precision',
    );
    expect(
      (await mint(a, packId, { rails: ['usdc'], amount_ceiling: { currency: 'USDC', amount: '1.005' } }))
        .statusCode,
    ).toBe(201);
    expectB(
      await mint(a, packId, { amount_ceiling: { currency: 'EUR', amount: '1' } }),
      400,
      'invalid_request',
    );
    const gated = await pack(a, { ...PACK, approval_threshold_usd: '100' });
    expectB(await mint(a, gated), 403, 'approvals_unavailable');
    const dual = await pack(a, { ...PACK, dual_control_threshold_usd: '100' });
    expectB(await mint(a, dual), 403, 'approvals_unavailable');
    const invoiced = await pack(a, { ...PACK, invoice_required: true });
    expectB(await mint(a, invoiced), 400, 'invoice_hash_missing');
    // An invoice a capsule binds must have been ingested (invoices.test.ts covers the bound mint).
    expectB(await mint(a, invoiced, { invoice_hash: `sha256:${'e'.repeat(64)}` }), 404, 'invoice_not_found');
    expectB(await mint(b, packId), 404, 'policy_pack_not_found');
  });

  it('consumes once: posts the spend to the ledger and chains a receipt', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    const res = await consume(a, c.capsule);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'consumed', consumption: { amount: '120.50', rail: 'ach' } });
    expect(res.json().receipt_id).toBeTruthy();
    const entries = await t.store.db
      .selectFrom('spend_ledger')
      .selectAll()
      .where('organization_id', '=', a.orgId)
      .where('action_id', '=', `capsule:${c.id}`)
      .execute();
    expect(entries.map((e) => [e.kind, Number(e.amount_micros), e.payer])).toEqual([
      ['commit', 120_500_000, c.payload.entity_id],
    ]);
    const receipt = await t.store.db
      .selectFrom('receipts')
      .selectAll()
      .where('organization_id', '=', a.orgId)
      .where('receipt_id', '=', res.json().receipt_id)
      .executeTakeFirst();
    expect(receipt).toBeTruthy();
    expectB(await consume(a, c.capsule), 409, 'capsule_consumed');
    expectB(await inject('POST', `/v1/gateway/capsules/${c.id}/revoke`, key(a)), 409, 'capsule_consumed');
  });

  it('lets exactly one of parallel consumes of one capsule through', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    const answers = await Promise.all(Array.from({ length: 8 }, () => consume(a, c.capsule)));
    expect(answers.filter((r) => r.statusCode === 200)).toHaveLength(1);
    for (const r of answers.filter((x) => x.statusCode !== 200)) expectB(r, 409, 'capsule_consumed');
    const entries = await t.store.db
      .selectFrom('spend_ledger')
      .select('id')
      .where('organization_id', '=', a.orgId)
      .where('action_id', '=', `capsule:${c.id}`)
      .execute();
    expect(entries).toHaveLength(1);
  });

  it('refuses a zero-value authorization: a ceiling of 0 at mint, an amount of 0 at consume', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    for (const [currency, amount] of [
      ['USD', '0'],
      ['USD', '0.00'],
      ['USDC', '0.000000'],
    ] as const) {
      const res = await mint(a, packId, { rails: ['usdc'], amount_ceiling: { currency, amount } });
      expect([amount, expectB(res, 400, 'invalid_request')['param']]).toEqual([
        amount,
        'amount_ceiling.amount',
      ]);
    }
    // The smallest amount of each currency is a payment.
    expect((await mint(a, packId, { amount_ceiling: { currency: 'USD', amount: '0.01' } })).statusCode).toBe(
      201,
    );
    expect(
      (await mint(a, packId, { rails: ['usdc'], amount_ceiling: { currency: 'USDC', amount: '0.000001' } }))
        .statusCode,
    ).toBe(201);
    // A consume of nothing neither spends nor uses the capsule up (nor moves what it binds).
    const c = (await mint(a, packId)).json();
    for (const amount of ['0', '0.00']) {
      const err = expectB(await consume(a, c.capsule, { amount }), 400, 'capsule_payload_invalid');
      expect(err['param']).toBe('amount');
    }
    // A capsule of 0 signed before mints refused it cannot pay 0 either.
    const payload = {
      ...c.payload,
      capsule_id: `${c.id}-zero`,
      nonce: `${c.payload.nonce}z`,
      amount_ceiling: { currency: 'USD', amount: '0.00' },
    };
    let input = '';
    const sig = await t.ctx.signing.signNaming((kid) => {
      input = capsuleSigningInput(payload, kid);
      return new TextEncoder().encode(input);
    });
    const zero = compactCapsule(input, sig.signature);
    const stored = (await createGatewayRepository(t.store.db).capsule(a.orgId, c.id))!;
    await createGatewayRepository(t.store.db).insertCapsule({
      ...stored,
      id: payload.capsule_id,
      payload: JSON.stringify(payload),
      capsule: zero,
    });
    expectB(await consume(a, zero, { amount: '0.00' }), 400, 'capsule_payload_invalid');
    expect((await inject('GET', `/v1/gateway/capsules/${payload.capsule_id}`, key(a))).json().status).toBe(
      'active',
    );
    expect((await consume(a, c.capsule)).statusCode).toBe(200);
  });

  it('names the issuer when a capsule was issued under another service address', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    const payload = { ...c.payload, issuer: 'https://other.example' };
    let input = '';
    const sig = await t.ctx.signing.signNaming((kid) => {
      input = capsuleSigningInput(payload, kid);
      return new TextEncoder().encode(input);
    });
    const err = expectB(
      await consume(a, compactCapsule(input, sig.signature)),
      400,
      'capsule_payload_invalid',
    );
    expect(err['param']).toBe('issuer');
    expect(err['message']).toContain('"https://other.example", not by this service');
  });

  it('answers capsule_payload_invalid naming the member for a consume body that fails validation', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    const cases: [Record<string, unknown>, string][] = [
      [{ amount: '-1.00' }, 'amount'],
      [{ amount: '050.00' }, 'amount'],
      [{ amount: '1e1' }, 'amount'],
      [{ amount: ' 50.00' }, 'amount'],
      [{ amount: '1000000000.01' }, 'amount'],
      [{ currency: 'EUR' }, 'currency'],
      [{ currency: 'USDC' }, 'currency'],
      [{ beneficiary: { name: 'a' } }, 'beneficiary'],
      [{ beneficiary: { name: '   ', account_number: 'DE00' } }, 'beneficiary.name'],
      [{ invoice_hash: `sha256:${'0'.repeat(64)}` }, 'invoice_hash'],
    ];
    for (const [over, param] of cases) {
      const err = expectB(await consume(a, c.capsule, over), 400, 'capsule_payload_invalid');
      expect([over, err['param']]).toEqual([over, param]);
    }
    // Other endpoints keep invalid_request for the same kind of failure.
    const other = expectB(
      await mint(a, packId, { amount_ceiling: { currency: 'EUR', amount: '5.00' } }),
      400,
      'invalid_request',
    );
    expect(other['param']).toBe('amount_ceiling.currency');
    expect(
      expectB(
        await inject('POST', '/v1/gateway/payees', key(a), { details: { name: 'a' } }),
        400,
        'invalid_request',
      )['param'],
    ).toBe('details');
    // Nothing changed: the capsule is still consumable.
    expect((await consume(a, c.capsule)).statusCode).toBe(200);
  });

  it('answers each drift with its code and changes nothing', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId, { rails: ['ach', 'usdc'] })).json();
    expectB(await consume(a, c.capsule, { rail: 'wire' }), 403, 'rail_not_in_allowlist');
    expectB(
      await consume(a, c.capsule, { beneficiary: { ...PAYEE, account_number: 'DE00' } }),
      403,
      'beneficiary_hash_mismatch',
    );
    expectB(await consume(a, c.capsule, { amount: '500.01' }), 403, 'amount_exceeds_capsule_ceiling');
    expect(
      expectB(await consume(a, c.capsule, { amount: '1.001' }), 400, 'invalid_amount_precision')['param'],
    ).toBe('amount');
    expect(
      expectB(await consume(a, c.capsule, { currency: 'USDC' }), 400, 'capsule_payload_invalid')['param'],
    ).toBe('currency');
    const parts = c.capsule.split('.');
    const flipped = `${parts[0]}.${parts[1]}.${parts[2].startsWith('A') ? `B${parts[2].slice(1)}` : `A${parts[2].slice(1)}`}`;
    expectB(await consume(a, flipped), 403, 'capsule_signature_invalid');
    const header = Buffer.from(
      JSON.stringify({ alg: 'EdDSA', kid: 'nobody', typ: 'svc.capsule+jws' }),
    ).toString('base64url');
    expectB(await consume(a, `${header}.${parts[1]}.${parts[2]}`), 403, 'capsule_kid_unknown');
    expectB(await consume(a, 'not-a-capsule'), 400, 'capsule_payload_invalid');
    // Still consumable after every refusal.
    expect((await consume(a, c.capsule)).statusCode).toBe(200);
  });

  it('refuses an expired capsule (past the skew) and a revoked one', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId, { ttl_seconds: 60 })).json();
    offset = 60_000 + 31_000;
    try {
      expectB(await consume(a, c.capsule), 403, 'capsule_expired');
    } finally {
      offset = 0;
    }
    const r = (await mint(a, packId)).json();
    expect((await inject('POST', `/v1/gateway/capsules/${r.id}/revoke`, key(a))).json().status).toBe(
      'revoked',
    );
    expectB(await consume(a, r.capsule), 409, 'capsule_revoked');
  });

  it('refuses held and quarantined payees until a person acts or the window ends', async () => {
    const packId = await pack(a);
    const details = { name: 'Fresh Payee', account_number: '777' };
    const c = (await mint(a, packId, { beneficiary: { details } })).json();
    const q = expectB(
      await consume(a, c.capsule, { beneficiary: details }),
      403,
      'beneficiary_quarantine_active',
    );
    expect(q['hint']).toContain('lift-quarantine');
    offset = 3_600_000 + 1000; // the pack's quarantine window (3600 s) is over
    try {
      const late = (await mint(a, packId, { beneficiary: { details } })).json();
      const payeeId = late.payee_id;
      await inject('POST', `/v1/gateway/payees/${payeeId}/hold`, key(a));
      expectB(await consume(a, late.capsule, { beneficiary: details }), 403, 'beneficiary_held');
      await inject('POST', `/v1/gateway/payees/${payeeId}/release`, asUser(a));
      expect((await consume(a, late.capsule, { beneficiary: details })).statusCode).toBe(200);
    } finally {
      offset = 0;
    }
    expectB(await mint(a, packId, { beneficiary: { payee_id: 'nope' } }), 404, 'beneficiary_not_found');
  });

  it('holds the entity caps over the shared spend ledger', async () => {
    const packId = await pack(a, { ...PACK, entity_caps: { usd_24h: '200' }, conditions: [] });
    await payee(a, PAYEE);
    const entity = 'entity-capped';
    const first = (await mint(a, packId, { entity_id: entity })).json();
    expect((await consume(a, first.capsule, { amount: '150' })).statusCode).toBe(200);
    const second = (await mint(a, packId, { entity_id: entity })).json();
    expectB(await consume(a, second.capsule, { amount: '50.01' }), 403, 'amount_exceeds_entity_cap');
    expect((await consume(a, second.capsule, { amount: '50' })).statusCode).toBe(200);
    // Another organization's entity of the same name has its own ledger.
    const otherPack = await pack(b, { ...PACK, entity_caps: { usd_24h: '200' }, conditions: [] });
    await payee(b, PAYEE);
    const other = (await mint(b, otherPack, { entity_id: entity })).json();
    expect((await consume(b, other.capsule, { amount: '200' })).statusCode).toBe(200);
  });

  it('counts entity caps per exact entity id, and refuses ids that differ from another only invisibly', async () => {
    const packId = await pack(a, { ...PACK, entity_caps: { usd_24h: '200' }, conditions: [] });
    await payee(a, PAYEE);
    const entity = 'acme-spelled';
    const first = (await mint(a, packId, { entity_id: entity })).json();
    expect((await consume(a, first.capsule, { amount: '200' })).statusCode).toBe(200);
    // The same id to the eye, spelled so that it would be another payer with a cap of its own.
    const spellings = [
      ` ${entity}`,
      `${entity} `,
      `${entity}\t`,
      `${entity}\u00a0`,
      `\ufeff${entity}`,
      `acme\u200b-spelled`,
      `acme-spel\u00adled`,
      `\u202e${entity}`,
      `${entity}\u0085`,
      `${entity}\u2028`,
    ];
    for (const spelled of spellings) {
      const err = expectB(await mint(a, packId, { entity_id: spelled }), 400, 'invalid_request');
      expect(err['param']).toBe('entity_id');
      const wf = await inject('POST', '/v1/gateway/workflows', key(a), {
        entity_id: spelled,
        workflow_id: 'w',
      });
      expect(expectB(wf, 400, 'invalid_request')['param']).toBe('entity_id');
    }
    // Unicode normalization: é written decomposed is refused; composed (NFC) it is an ordinary id.
    expectB(await mint(a, packId, { entity_id: 'cafe\u0301' }), 400, 'invalid_request');
    expect((await mint(a, packId, { entity_id: 'caf\u00e9' })).statusCode).toBe(201);
    // Inner spaces are part of an id.
    expect((await mint(a, packId, { entity_id: 'acme spelled' })).statusCode).toBe(201);
    // Ids compare exactly, case included: another case is another entity, with a cap of its own.
    const upper = (await mint(a, packId, { entity_id: entity.toUpperCase() })).json();
    expect((await consume(a, upper.capsule, { amount: '200' })).statusCode).toBe(200);
    // A pack bounds the entities it pays with a condition on payment.entity_id.
    const only = await pack(a, {
      ...PACK,
      conditions: [{ name: 'entities', expression: `payment.entity_id in ["${entity}"]` }],
    });
    const outside = (await mint(a, only, { entity_id: entity.toUpperCase() })).json();
    expectB(await consume(a, outside.capsule, { amount: '10' }), 403, 'policy_condition_failed');
  });

  it('refuses a capsule whose pack changed, and evaluates CEL conditions that never allow on error', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    await inject('PUT', `/v1/gateway/packs/${packId}`, asUser(a), { ...PACK, max_ttl_seconds: 30 });
    expectB(await consume(a, c.capsule), 409, 'policy_pack_hash_mismatch');

    const strict = await pack(a, {
      ...PACK,
      conditions: [{ name: 'small', expression: 'payment.amount < 100.0' }],
    });
    const s = (await mint(a, strict)).json();
    expectB(await consume(a, s.capsule), 403, 'policy_condition_failed');
    expect((await consume(a, s.capsule, { amount: '99.99' })).statusCode).toBe(200);

    const broken = await pack(a, {
      ...PACK,
      conditions: [{ name: 'div', expression: 'int(payment.rail) > 0' }],
    });
    const e = (await mint(a, broken)).json();
    expectB(await consume(a, e.capsule), 500, 'policy_eval_error');
    expect((await inject('GET', `/v1/gateway/capsules/${e.id}`, key(a))).json().status).toBe('active');
  });

  it('answers capsule_replayed for a second capsule carrying a claimed nonce', async () => {
    const packId = await pack(a);
    await payee(a, PAYEE);
    const c = (await mint(a, packId)).json();
    expect((await consume(a, c.capsule)).statusCode).toBe(200);
    // A second capsule with the same entity and nonce (as a minting fault or a forger would make it).
    const payload = { ...c.payload, capsule_id: `${c.id}-twin` };
    let input = '';
    const sig = await t.ctx.signing.signNaming((kid) => {
      input = capsuleSigningInput(payload, kid);
      return new TextEncoder().encode(input);
    });
    const twin = compactCapsule(input, sig.signature);
    const stored = (await createGatewayRepository(t.store.db).capsule(a.orgId, c.id))!;
    await createGatewayRepository(t.store.db).insertCapsule({
      ...stored,
      id: payload.capsule_id,
      payload: JSON.stringify(payload),
      capsule: twin,
      status: 'active',
      consumption: null,
      receipt_id: null,
    });
    expectB(await consume(a, twin), 409, 'capsule_replayed');
  });

  it('counts id lengths in characters, as the published schema does: what mints also consumes', async () => {
    const packId = await pack(a, { ...PACK, conditions: [] });
    await payee(a, PAYEE);
    // 150 emoji: 150 characters (code points), 300 UTF-16 units.
    const entity = '\u{1F600}'.repeat(150);
    const workflow = '\u{1F4B8}'.repeat(200);
    expect(
      (await inject('POST', '/v1/gateway/workflows', key(a), { entity_id: entity, workflow_id: workflow }))
        .statusCode,
    ).toBe(201);
    const moved = await inject(
      'POST',
      `/v1/gateway/workflows/${encodeURIComponent(entity)}/${encodeURIComponent(workflow)}/transition`,
      asUser(a),
      { to: 'approved' },
    );
    expect(moved.statusCode).toBe(200);
    const minted = await mint(a, packId, {
      entity_id: entity,
      agent_id: '\u{1F916}'.repeat(200),
      workflow_id: workflow,
    });
    expect(minted.statusCode).toBe(201);
    const res = await consume(a, minted.json().capsule);
    expect([res.statusCode, res.json().status]).toEqual([200, 'consumed']);
    // 201 characters are refused at mint, never signed.
    const long = expectB(
      await mint(a, packId, { agent_id: '\u{1F916}'.repeat(201) }),
      400,
      'invalid_request',
    );
    expect(long['param']).toBe('agent_id');
  });
});

describe('Idempotency-Key', () => {
  it('replays the first answer for the same body and refuses a different one', async () => {
    const packId = await pack(a);
    const headers = { ...key(a), 'idempotency-key': 'mint-1' };
    const body = {
      entity_id: 'idem-entity',
      agent_id: 'agent-1',
      pack_id: packId,
      rails: ['ach'],
      beneficiary: { details: PAYEE },
      amount_ceiling: { currency: 'USD', amount: '10' },
      ttl_seconds: 60,
    };
    const first = await inject('POST', '/v1/gateway/capsules', headers, body);
    expect(first.statusCode).toBe(201);
    const again = await inject('POST', '/v1/gateway/capsules', headers, { ...body });
    expect(again.statusCode).toBe(201);
    expect(again.json().id).toBe(first.json().id);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expectB(
      await inject('POST', '/v1/gateway/capsules', headers, { ...body, ttl_seconds: 61 }),
      400,
      'idempotency_key_reused_with_different_payload',
    );
    // Keys belong to an organization: another one may use the same key.
    const otherPack = await pack(b);
    const other = await inject(
      'POST',
      '/v1/gateway/capsules',
      { ...key(b), 'idempotency-key': 'mint-1' },
      { ...body, pack_id: otherPack },
    );
    expect(other.statusCode).toBe(201);
    expect(other.json().id).not.toBe(first.json().id);
    // After 24 hours the key is free again.
    offset = 24 * 3600 * 1000 + 1000;
    try {
      const later = await inject('POST', '/v1/gateway/capsules', headers, { ...body, ttl_seconds: 61 });
      expect(later.statusCode).toBe(201);
    } finally {
      offset = 0;
    }
  });

  it('takes any printable ASCII key, inner spaces included, and refuses the rest', async () => {
    const body = (n: number) => ({ details: { name: `Idem Payee ${n}`, account_number: `AC${n}` } });
    const post = (k: string, n: number) =>
      inject('POST', '/v1/gateway/payees', { ...key(a), 'idempotency-key': k }, body(n));
    const spaced = await post('a b', 1);
    expect(spaced.statusCode).toBe(201);
    const again = await post('a b', 1);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json().id).toBe(spaced.json().id);
    // Another key: two spaces are not one.
    expect((await post('a  b', 2)).headers['idempotent-replayed']).toBeUndefined();
    expectB(await post('a b', 3), 400, 'idempotency_key_reused_with_different_payload');
    expect((await post(`!" ~${'x'.repeat(251)}`, 4)).statusCode).toBe(201);
    for (const bad of ['', ' ', '   ', ' a', 'a ', 'a\tb', 'é', 'x'.repeat(256)]) {
      const res = await post(bad, 5);
      expect([bad, expectB(res, 400, 'invalid_request')['param']]).toEqual([bad, 'Idempotency-Key']);
    }
  });
});

describe('two instances on one database', () => {
  const one = useTestApp();
  const two = useTestApp({}, () => ({ database: one.database }));

  it('let exactly one of parallel consumes of one capsule through', async () => {
    const x = await createTenant(one);
    const headers = keyHeader(x.apiKey);
    expect(
      (await one.inject({ method: 'PUT', url: '/v1/gateway/packs/p', headers: asUser(x), payload: PACK }))
        .statusCode,
    ).toBe(201);
    const p = (
      await one.inject({ method: 'POST', url: '/v1/gateway/payees', headers, payload: { details: PAYEE } })
    ).json();
    await one.inject({
      method: 'POST',
      url: `/v1/gateway/payees/${p.id}/lift-quarantine`,
      headers: asUser(x),
    });
    const minted = await one.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers,
      payload: {
        entity_id: 'e',
        agent_id: 'a',
        pack_id: 'p',
        rails: ['ach'],
        beneficiary: { payee_id: p.id },
        amount_ceiling: { currency: 'USD', amount: '10' },
        ttl_seconds: 60,
      },
    });
    expect(minted.statusCode).toBe(201);
    const body = {
      capsule: minted.json().capsule,
      amount: '10',
      currency: 'USD',
      rail: 'ach',
      beneficiary: PAYEE,
    };
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        (i % 2 === 0 ? one : two).inject({
          method: 'POST',
          url: '/v1/gateway/capsules/consume',
          headers,
          payload: body,
        }),
      ),
    );
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 409, 409, 409, 409, 409]);
    const entries = await one.store.db
      .selectFrom('spend_ledger')
      .select('id')
      .where('organization_id', '=', x.orgId)
      .where('kind', '=', 'commit')
      .execute();
    expect(entries).toHaveLength(1);
  });
});

describe('a mint whose capsule would not verify', () => {
  // An issuer longer than the payload schema allows (2048 characters): no capsule of it would verify.
  const long = useTestApp({ baseUrl: `http://127.0.0.1:8080/${'x'.repeat(2100)}` });

  it('is refused before signing, and uses no approval', async () => {
    const x = await createTenant(long);
    await setTier(long, x, 'team');
    const send = (method: 'POST' | 'PUT', url: string, headers: Record<string, string>, payload: object) =>
      long.inject({ method, url, headers, payload });
    const packed = await send('PUT', '/v1/gateway/packs/p', asUser(x), {
      allowed_rails: ['ach'],
      quarantine_seconds: 0,
      approval_threshold_usd: '100',
    });
    expect(packed.statusCode).toBe(201);
    const p = (await send('POST', '/v1/gateway/payees', keyHeader(x.apiKey), { details: PAYEE })).json();
    // An approval of this very capsule, approved by a person.
    const args = {
      entity_id: 'e',
      agent_id: 'agent-1',
      pack_id: 'p',
      pack_version: 1,
      policy_sha256: packed.json().sha256,
      rail_allowlist: ['ach'],
      beneficiary: p.beneficiary_hash,
      payee: p.details,
      amount_ceiling: { currency: 'USD', amount: '500.00' },
      invoice_hash: null,
      workflow_id: null,
    };
    const opened = await send('POST', '/v1/approvals', asUser(x), {
      toolName: 'gateway.capsule',
      arguments: args,
    });
    expect(opened.statusCode).toBe(201);
    const id = opened.json().id as string;
    expect(
      (await send('POST', `/v1/approvals/${id}/resolve`, asUser(x), { action: 'approve' })).json().status,
    ).toBe('approved');
    const body = {
      entity_id: 'e',
      agent_id: 'agent-1',
      pack_id: 'p',
      rails: ['ach'],
      beneficiary: { payee_id: p.id },
      amount_ceiling: { currency: 'USD', amount: '500.00' },
      ttl_seconds: 300,
    };
    const refused = await send('POST', '/v1/gateway/capsules', keyHeader(x.apiKey), {
      ...body,
      approval_ref: id,
    });
    expect([refused.statusCode, refused.json().error.code]).toEqual([500, 'internal_server_error']);
    // Nothing was minted, and the approval was not used up by it.
    const capsules = await long.store.db
      .withTables<Pick<GatewayTables, 'gateway_capsules'>>()
      .selectFrom('gateway_capsules')
      .select('id')
      .where('organization_id', '=', x.orgId)
      .execute();
    expect(capsules).toHaveLength(0);
    const approval = await long.store.db
      .selectFrom('approvals')
      .select(['status', 'used_at'])
      .where('id', '=', id)
      .executeTakeFirst();
    expect(approval).toEqual({ status: 'approved', used_at: null });
    // Without approval_ref, no approval is opened for a capsule that cannot be minted.
    const before = await long.store.db.selectFrom('approvals').select('id').execute();
    expect((await send('POST', '/v1/gateway/capsules', keyHeader(x.apiKey), body)).statusCode).toBe(500);
    expect(await long.store.db.selectFrom('approvals').select('id').execute()).toHaveLength(before.length);
  });
});
