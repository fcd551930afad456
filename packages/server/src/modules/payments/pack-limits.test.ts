import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { gatewayKit } from '../../../test/gateway-kit.js';
import { asUser, createTenant, type Tenant } from '../../../test/helpers.js';
import { BILLION_LAUGHS, ublInvoice } from '../../../test/payment-provider.js';
import type { PackContent } from './model.js';
import { packJson, packSha256 } from './packs.js';
import { createGatewayRepository } from './repository.js';

let a: Tenant;
let k: ReturnType<typeof gatewayKit>;

const PAYEE = { name: 'ACME Supplies', account_number: 'DE89 3704 0044 0532 0130 00', country: 'DE' };
const PACK = { allowed_rails: ['ach'], quarantine_seconds: 0 };
const SLUG = 'payment.entity_id.matches("^([a-z0-9]+-?)*$")';
/** The hunt's condition: six comprehensions over 25 members, ~700 characters; one consume blocked 10.6 s. */
const SIX_DEEP = (() => {
  const list = `[${Array.from({ length: 25 }, (_, i) => i).join(',')}]`;
  let e = 'true';
  for (let i = 0; i < 6; i++) e = `${list}.all(${'abcdef'[i]}, ${e})`;
  return e;
})();

const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  k = gatewayKit(t);
  await k.payee(a, PAYEE);
});

const mintBody = (packId: string, over: Record<string, unknown> = {}) => ({
  entity_id: `entity-${k.next()}`,
  pack_id: packId,
  rails: ['ach'],
  beneficiary: { details: PAYEE },
  amount_ceiling: { currency: 'USD', amount: '50.00' },
  ...over,
});
const consume = (capsule: string, amount = '10.00') =>
  k.consume(a, { capsule, amount, currency: 'USD', rail: 'ach', beneficiary: PAYEE });

describe('pack conditions cannot hold the server', () => {
  it('searches a pattern catastrophic for backtracking with RE2: the consume answers at once', async () => {
    const packId = await k.pack(a, {
      ...PACK,
      conditions: [
        { name: 'slug_entities', expression: SLUG },
        // RE2 syntax, as CEL specifies: \Q…\E quotes (RegExp reads the letters Q and E).
        { name: 'agent', expression: 'payment.agent_id.matches("^\\\\Qagent-1\\\\E$")' },
      ],
    });
    const slug = k.ok(await k.mint(a, mintBody(packId, { entity_id: 'acme-eu' })), 201);
    expect(k.ok(await consume(slug.capsule)).status).toBe('consumed');
    // The hunt's input took 63 s of blocked event loop with RegExp (29 characters; each more doubles it).
    const bad = k.ok(await k.mint(a, mintBody(packId, { entity_id: `${'a'.repeat(30)}!` })), 201);
    const started = Date.now();
    const err = k.expectB(await consume(bad.capsule), 403, 'policy_condition_failed');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(err['param']).toBe('slug_entities');
  });

  it('refuses at save a condition nested too deep, a pattern RE2 cannot search, a cost above the budget', async () => {
    for (const [expression, message] of [
      [SIX_DEEP, /nests comprehensions .* more than 3 deep/],
      ['payment.entity_id.matches("(a)\\\\1")', /unusable: it does not compile as an RE2 pattern/],
      [
        `${`[${Array.from({ length: 100 }, (_, i) => i).join(',')}]`}.all(a, payment.entity_id in [${Array.from({ length: 100 }, (_, i) => `"e${i}"`).join(',')}])`,
        /may take up to \d+ steps to evaluate; a pack's conditions may take 500000 together/,
      ],
    ] as const) {
      const res = await k.inject('PUT', `/v1/gateway/packs/deep-${k.next()}`, asUser(a), {
        ...PACK,
        conditions: [{ name: 'c', expression }],
      });
      const err = k.expectB(res, 400, 'invalid_request');
      expect(err['param']).toBe('conditions.0.expression');
      expect(err['message']).toMatch(message);
    }
  });

  it('fails closed, at once, on a pack stored before conditions were bounded', async () => {
    const packId = `stored-${k.next()}`;
    const content: PackContent = {
      entity_caps: { usd_24h: null, usd_7d: null, usd_30d: null },
      approval_threshold_usd: null,
      dual_control_threshold_usd: null,
      allowed_rails: ['ach'],
      invoice_required: false,
      quarantine_seconds: 0,
      max_ttl_seconds: 3600,
      conditions: [
        { name: 'lookahead', expression: 'payment.entity_id.matches("^(?=e)")' },
        { name: 'six_deep', expression: SIX_DEEP },
      ],
    };
    expect(
      await createGatewayRepository(t.store.db).insertPack({
        organization_id: a.orgId,
        pack_id: packId,
        version: 1,
        content: packJson(content),
        sha256: packSha256(content),
        created_at: new Date().toISOString(),
      }),
    ).toBe(true);
    const c = k.ok(await k.mint(a, mintBody(packId)), 201);
    const started = Date.now();
    const err = k.expectB(await consume(c.capsule), 500, 'policy_eval_error');
    expect(Date.now() - started).toBeLessThan(5000);
    expect([err['param'], err['message']]).toEqual([
      'lookahead',
      expect.stringMatching(/^condition lookahead cannot be evaluated: .*does not compile as an RE2 pattern/),
    ]);
    expect(k.ok(await k.inject('GET', `/v1/gateway/capsules/${c.id}`, k.key(a))).status).toBe('active');
  });
});

describe('mint under a pack version', () => {
  it('refuses a version whose content was replaced (its capsule could never be consumed)', async () => {
    const packId = await k.pack(a, PACK);
    const put = (body: object) => k.inject('PUT', `/v1/gateway/packs/${packId}`, asUser(a), body);
    k.ok(await put({ ...PACK, entity_caps: { usd_24h: '10.00' } }), 201);
    const err = k.expectB(
      await k.mint(a, mintBody(packId, { pack_version: 1 })),
      409,
      'policy_pack_hash_mismatch',
    );
    expect(err['param']).toBe('pack_version');
    expect(err['message']).toMatch(/version 1 was replaced by version 2/);
    // The latest, named or not, mints; so does an older version of the same content (same sha256).
    const v2 = k.ok(await k.mint(a, mintBody(packId, { pack_version: 2 })), 201);
    expect(v2.payload.pack_version).toBe(2);
    k.ok(await put({ ...PACK, entity_caps: { usd_24h: '10.00' } }), 201);
    const same = k.ok(await k.mint(a, mintBody(packId, { pack_version: 2 })), 201);
    expect(k.ok(await consume(same.capsule, '5.00')).status).toBe('consumed');
    expect(k.ok(await consume(v2.capsule, '5.00')).status).toBe('consumed');
    k.expectB(await k.mint(a, mintBody(packId, { pack_version: 9 })), 404, 'policy_pack_not_found');
  });
});

describe('invoice amounts follow the rules of every gateway amount', () => {
  const ingest = (amount: string, currency = 'USD') =>
    k.inject('POST', '/v1/gateway/invoices', k.key(a), {
      invoice_number: `AMT-${k.next()}`,
      payee: PAYEE,
      amount: { currency, amount },
    });

  it('answers invalid_amount_precision for more decimals than the currency has', async () => {
    for (const [amount, currency] of [
      ['100.505', 'USD'],
      ['1.1234567', 'USDC'],
      ['1.123456789', 'USD'],
    ] as const) {
      const err = k.expectB(await ingest(amount, currency), 400, 'invalid_amount_precision');
      expect(err['param']).toBe('amount.amount');
    }
    // Zeros past the currency's places change nothing, as before.
    expect(k.ok(await ingest('100.5000000'), 201).amount).toEqual({ currency: 'USD', amount: '100.5' });
  });

  it('refuses an invoice of nothing, which no capsule could pay', async () => {
    for (const amount of ['0', '0.00', '0.000']) {
      const err = k.expectB(await ingest(amount), 400, 'invalid_request');
      expect([err['param'], err['message']]).toEqual([
        'amount.amount',
        'amount.amount must be greater than 0',
      ]);
    }
    const failed = k.expectB(
      await k.ingestXml(a, ublInvoice({ number: `ZERO-${k.next()}`, amount: '0.00' })),
      502,
      'invoice_parse_failed',
    );
    const kept = k.ok(await k.inject('GET', `/v1/gateway/invoices/${failed['invoice_id']}`, k.key(a)));
    expect(kept.parse_error).toBe('PayableAmount must be greater than 0');
    // Other malformed amounts keep their answers.
    k.expectB(await ingest('1e2'), 400, 'invalid_request');
    k.expectB(await ingest('1000000000.01'), 400, 'invalid_request');
    k.expectB(await k.ingestXml(a, BILLION_LAUGHS), 502, 'invoice_parse_failed');
  });
});
