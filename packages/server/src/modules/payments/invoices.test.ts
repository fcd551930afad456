import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { gatewayKit } from '../../../test/gateway-kit.js';
import { createTenant, type Tenant } from '../../../test/helpers.js';
import { BILLION_LAUGHS, ublInvoice } from '../../../test/payment-provider.js';
import type { FlowTables } from './flow-model.js';

let a: Tenant;
let b: Tenant;
let k: ReturnType<typeof gatewayKit>;

const PAYEE = { name: 'ACME Supplies', account_number: 'DE89 3704 0044 0532 0130 00', country: 'DE' };
const PACK = { allowed_rails: ['ach', 'ledger'], invoice_required: true, quarantine_seconds: 0 };
const jsonInvoice = (over: Record<string, unknown> = {}) => ({
  invoice_number: `J-${k.next()}`,
  due_date: '2026-12-01',
  payee: PAYEE,
  amount: { currency: 'USD', amount: '250.00' },
  ...over,
});

const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
  k = gatewayKit(t);
});

describe('invoice ingest', () => {
  it('parses a UBL 2.1 invoice: payee, amount, currency, due date and a canonical hash', async () => {
    const res = await k.ingestXml(a, ublInvoice({ number: 'UBL-1' }));
    const inv = k.ok(res, 201);
    expect(inv).toMatchObject({
      status: 'parsed',
      format: 'ubl',
      invoice_number: 'UBL-1',
      due_date: '2026-12-01',
      amount: { currency: 'USD', amount: '250' },
      payee: { name: 'acme supplies', account_number: 'DE89370400440532013000', country: 'DE' },
    });
    expect(inv.invoice_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The payee hashes like a registered beneficiary with the same details.
    const payee = (await k.inject('POST', '/v1/gateway/payees', k.key(a), { details: PAYEE })).json() as {
      beneficiary_hash: string;
    };
    expect(inv.beneficiary_hash).toBe(payee.beneficiary_hash);
    // The same invoice again (other formatting, same terms) is the kept one; so is its JSON form.
    const again = k.ok(await k.ingestXml(a, ublInvoice({ number: 'UBL-1', amount: '250.0' })), 200);
    expect(again.id).toBe(inv.id);
    const asJson = k.ok(
      await k.inject('POST', '/v1/gateway/invoices', k.key(a), {
        invoice_number: 'UBL-1',
        issue_date: '2026-11-01',
        due_date: '2026-12-01',
        payee: PAYEE,
        amount: { currency: 'USD', amount: '250' },
      }),
      200,
    );
    expect(asJson.invoice_hash).toBe(inv.invoice_hash);
    expect(k.ok(await k.inject('GET', `/v1/gateway/invoices/${inv.invoice_hash}`, k.key(a))).id).toBe(inv.id);
    // Another organization sees none of it.
    k.expectB(await k.inject('GET', `/v1/gateway/invoices/${inv.id}`, k.key(b)), 404, 'invoice_not_found');
  });

  it('takes a structured JSON invoice and refuses a malformed one without keeping it', async () => {
    const inv = k.ok(await k.inject('POST', '/v1/gateway/invoices', k.key(a), jsonInvoice()), 201);
    expect(inv).toMatchObject({ status: 'parsed', format: 'json', amount: { amount: '250' } });
    const bad = k.expectB(
      await k.inject('POST', '/v1/gateway/invoices', k.key(a), jsonInvoice({ due_date: '01/12/2026' })),
      400,
      'invalid_request',
    );
    expect(bad['param']).toBe('due_date');
    const plain = await t.inject({
      method: 'POST',
      url: '/v1/gateway/invoices',
      headers: { ...k.key(a), 'content-type': 'text/plain' },
      payload: 'INV 1: 250 USD',
    });
    expect(k.expectB(plain as never, 415, 'unsupported_media_type')['message']).toMatch(/application\/xml/);
    const missing = k.expectB(
      await k.inject('POST', '/v1/gateway/invoices', k.key(a), { invoice_number: 'x' }),
      400,
      'invalid_request',
    );
    expect(missing['param']).toBeTruthy();
  });

  it('keeps an unparseable document in parse_failed and answers 502 invoice_parse_failed', async () => {
    for (const doc of [
      '<Invoice><unclosed></Invoice>',
      '<CreditNote xmlns="urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2"><ID>1</ID></CreditNote>',
      ublInvoice({ number: 'NO-AMOUNT' }).replace(/<cbc:PayableAmount[^/]*\/cbc:PayableAmount>/, ''),
    ]) {
      const err = k.expectB(await k.ingestXml(a, doc), 502, 'invoice_parse_failed');
      const kept = k.ok(await k.inject('GET', `/v1/gateway/invoices/${err['invoice_id']}`, k.key(a)));
      expect(kept).toMatchObject({ status: 'parse_failed', invoice_hash: err['invoice_hash'], amount: null });
      expect(kept.parse_error).toBeTruthy();
    }
  });

  it('takes only invoices in a currency the gateway pays (USD, USDC)', async () => {
    for (const currency of ['XYZ', 'EUR']) {
      const err = k.expectB(
        await k.inject(
          'POST',
          '/v1/gateway/invoices',
          k.key(a),
          jsonInvoice({ invoice_number: `CUR-${currency}`, amount: { currency, amount: '10.00' } }),
        ),
        400,
        'invalid_request',
      );
      expect([err['param'], err['message']]).toEqual([
        'amount.currency',
        'amount.currency must be one of USD, USDC',
      ]);
      // A UBL document is kept as received, as parse_failed, saying why.
      const failed = k.expectB(
        await k.ingestXml(a, ublInvoice({ number: `CUR-${currency}`, currency })),
        502,
        'invoice_parse_failed',
      );
      const kept = k.ok(await k.inject('GET', `/v1/gateway/invoices/${failed['invoice_id']}`, k.key(a)));
      expect(kept).toMatchObject({ status: 'parse_failed', amount: null });
      expect(kept.parse_error).toMatch(
        new RegExp(`currencyID ${currency} is not a currency the gateway pays`),
      );
    }
    // Of the refused ones only the UBL documents were kept: the JSON ones left nothing.
    const stored = await t.store.db
      .withTables<Pick<FlowTables, 'gateway_invoices'>>()
      .selectFrom('gateway_invoices')
      .select(['format', 'status'])
      .where('organization_id', '=', a.orgId)
      .where('document', 'like', '%CUR-%')
      .execute();
    expect(stored).toEqual([
      { format: 'ubl', status: 'parse_failed' },
      { format: 'ubl', status: 'parse_failed' },
    ]);
    const usdc = k.ok(
      await k.inject(
        'POST',
        '/v1/gateway/invoices',
        k.key(a),
        jsonInvoice({ invoice_number: 'CUR-USDC', amount: { currency: 'USDC', amount: '10.5' } }),
      ),
      201,
    );
    expect(usdc.amount).toEqual({ currency: 'USDC', amount: '10.5' });
    expect(
      k.ok(await k.ingestXml(a, ublInvoice({ number: 'CUR-UBL-USDC', currency: 'USDC' })), 201).status,
    ).toBe('parsed');
  });

  it('takes only amounts the currency can be paid in: USD to the cent, USDC to six decimals', async () => {
    const err = k.expectB(
      await k.inject(
        'POST',
        '/v1/gateway/invoices',
        k.key(a),
        jsonInvoice({ invoice_number: 'PREC-1', amount: { currency: 'USD', amount: '12.345' } }),
      ),
      400,
      'invalid_amount_precision',
    );
    expect([err['param'], err['message']]).toEqual([
      'amount.amount',
      'amount.amount 12.345: USD amounts have at most 2 decimal places',
    ]);
    const failed = k.expectB(
      await k.ingestXml(a, ublInvoice({ number: 'PREC-2', amount: '12.345' })),
      502,
      'invoice_parse_failed',
    );
    const kept = k.ok(await k.inject('GET', `/v1/gateway/invoices/${failed['invoice_id']}`, k.key(a)));
    expect(kept.parse_error).toMatch(/PayableAmount 12\.345: USD amounts have at most 2 decimal places/);
    // Zeros past the cent change nothing; USDC takes six decimals.
    const zeros = k.ok(
      await k.inject(
        'POST',
        '/v1/gateway/invoices',
        k.key(a),
        jsonInvoice({ invoice_number: 'PREC-3', amount: { currency: 'USD', amount: '12.500' } }),
      ),
      201,
    );
    expect(zeros.amount).toEqual({ currency: 'USD', amount: '12.5' });
    const usdc = k.ok(
      await k.inject(
        'POST',
        '/v1/gateway/invoices',
        k.key(a),
        jsonInvoice({ invoice_number: 'PREC-4', amount: { currency: 'USDC', amount: '12.345678' } }),
      ),
      201,
    );
    expect(usdc.amount).toEqual({ currency: 'USDC', amount: '12.345678' });
  });

  it('refuses a billion-laughs document (no entity is expanded) and any DTD', async () => {
    const err = k.expectB(await k.ingestXml(a, BILLION_LAUGHS), 502, 'invoice_parse_failed');
    expect(String(err['message'])).toMatch(/document type declarations/);
    const xxe = ublInvoice({ number: 'XXE' }).replace(
      '<Invoice',
      '<!DOCTYPE Invoice [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<Invoice',
    );
    k.expectB(await k.ingestXml(a, xxe), 502, 'invoice_parse_failed');
    // A bare entity reference without a DTD stays inert text, never expanded.
    const inert = k.ok(await k.ingestXml(a, ublInvoice({ number: 'INERT', note: '&lol9;' })), 201);
    expect(inert.status).toBe('parsed');
  });

  it('decodes predefined entities and character references, so the payee hashes as its JSON form', async () => {
    const xml = ublInvoice({ number: 'AMP-&#49;', name: 'Smith &amp; Sons', amount: '90.00' });
    const inv = k.ok(await k.ingestXml(a, xml), 201);
    expect(inv).toMatchObject({ invoice_number: 'AMP-1', payee: { name: 'smith & sons' } });
    const asJson = k.ok(
      await k.inject('POST', '/v1/gateway/invoices', k.key(a), {
        invoice_number: 'AMP-1',
        issue_date: '2026-11-01',
        due_date: '2026-12-01',
        payee: { ...PAYEE, name: 'Smith & Sons' },
        amount: { currency: 'USD', amount: '90' },
      }),
      200,
    );
    expect(asJson.id).toBe(inv.id);
    const payee = (
      await k.inject('POST', '/v1/gateway/payees', k.key(a), { details: { ...PAYEE, name: 'Smith & Sons' } })
    ).json() as { beneficiary_hash: string };
    expect(inv.beneficiary_hash).toBe(payee.beneficiary_hash);
    // Decoded once: an escaped entity stays the text it escapes.
    const once = k.ok(await k.ingestXml(a, ublInvoice({ number: 'AMP-&amp;lt;' })), 201);
    expect(once.invoice_number).toBe('AMP-&lt;');
    // A character reference to no XML character is a parse failure, not a crash.
    k.expectB(await k.ingestXml(a, ublInvoice({ number: 'AMP-&#0;' })), 502, 'invoice_parse_failed');
  });

  it('refuses a document repeating an element it reads that UBL allows once (which one counts?)', async () => {
    const base = ublInvoice({ number: 'DUP-1', amount: '100.00' });
    const repeated = [
      base.replace(
        '</cac:LegalMonetaryTotal>',
        '  <cbc:PayableAmount currencyID="USD">999.00</cbc:PayableAmount>\n  </cac:LegalMonetaryTotal>',
      ),
      base.replace(
        '</Invoice>',
        '<cac:LegalMonetaryTotal><cbc:PayableAmount currencyID="USD">999.00</cbc:PayableAmount></cac:LegalMonetaryTotal></Invoice>',
      ),
      base.replace('<cbc:ID>DUP-1</cbc:ID>', '<cbc:ID>DUP-1</cbc:ID><cbc:ID>DUP-2</cbc:ID>'),
      base.replace(
        '<cac:PayeeFinancialAccount><cbc:ID>',
        '<cac:PayeeFinancialAccount><cbc:ID>GB29 NWBK 6016 1331 9268 19</cbc:ID><cbc:ID>',
      ),
    ];
    for (const doc of repeated) {
      const err = k.expectB(await k.ingestXml(a, doc), 502, 'invoice_parse_failed');
      expect(String(err['message'])).toMatch(/appears more than once/);
    }
    // The payee's name and country are read too: two of either say two payees.
    for (const [doc, said] of [
      [
        base.replace(
          '<cbc:Name>ACME Supplies</cbc:Name>',
          '<cbc:Name>ACME Supplies</cbc:Name><cbc:Name>Mallory Ltd</cbc:Name>',
        ),
        /PartyName\/Name appears more than once/,
      ],
      [
        base.replace(
          '<cac:PartyName><cbc:Name>ACME Supplies</cbc:Name></cac:PartyName>',
          '<cac:PartyName><cbc:Name>ACME Supplies</cbc:Name></cac:PartyName><cac:PartyName><cbc:Name>Mallory Ltd</cbc:Name></cac:PartyName>',
        ),
        /PartyName gives different names \(acme supplies, mallory ltd\)/,
      ],
      [
        base.replace(
          '<cbc:IdentificationCode>DE</cbc:IdentificationCode>',
          '<cbc:IdentificationCode>DE</cbc:IdentificationCode><cbc:IdentificationCode>GB</cbc:IdentificationCode>',
        ),
        /Country\/IdentificationCode appears more than once/,
      ],
    ] as const) {
      expect(doc).not.toBe(base);
      const err = k.expectB(await k.ingestXml(a, doc), 502, 'invoice_parse_failed');
      expect(String(err['message'])).toMatch(said);
    }
    // The same name twice is one name, as the payee's name is compared (case, spaces).
    const twice = base.replace(
      '<cac:PartyName><cbc:Name>ACME Supplies</cbc:Name></cac:PartyName>',
      '<cac:PartyName><cbc:Name>ACME Supplies</cbc:Name></cac:PartyName><cac:PartyName><cbc:Name>Acme  supplies</cbc:Name></cac:PartyName>',
    );
    expect(k.ok(await k.ingestXml(a, twice.replace('DUP-1', 'DUP-2')), 201).payee.name).toBe('acme supplies');
    // Several payment means are UBL: the first one's account is read.
    const means = base.replace(
      '</cac:PaymentMeans>',
      '</cac:PaymentMeans>\n  <cac:PaymentMeans><cbc:PaymentMeansCode>30</cbc:PaymentMeansCode><cac:PayeeFinancialAccount><cbc:ID>GB29 NWBK 6016 1331 9268 19</cbc:ID></cac:PayeeFinancialAccount></cac:PaymentMeans>',
    );
    const read = k.ok(await k.ingestXml(a, means), 201);
    expect(read).toMatchObject({ amount: { currency: 'USD', amount: '100' } });
    expect(read.payee.account_number).toBe('DE89370400440532013000');
  });

  it('refuses a document holding U+0000 with 400, on every store, and keeps nothing', async () => {
    for (const doc of [
      ublInvoice({ number: 'NUL-1', name: 'ACME\u0000 Supplies' }),
      ublInvoice({ number: 'NUL-2', note: '\u0000' }),
      '\u0000not xml',
    ]) {
      const err = k.expectB(await k.ingestXml(a, doc), 400, 'invalid_request');
      expect(err['param']).toBe('body');
      expect(String(err['message'])).toMatch(/U\+0000/);
      const hash = `sha256:${createHash('sha256').update(doc).digest('hex')}`;
      k.expectB(await k.inject('GET', `/v1/gateway/invoices/${hash}`, k.key(a)), 404, 'invoice_not_found');
    }
    const rows = await t.store.db
      .withTables<FlowTables>()
      .selectFrom('gateway_invoices')
      .select('document')
      .where('organization_id', '=', a.orgId)
      .execute();
    expect(rows.filter((r) => r.document.includes('NUL-'))).toEqual([]);
  });

  it("checks the root element's own namespace, not text that mentions it", async () => {
    const ns = 'urn:oasis:names:specification:ubl:schema:xsd:Invoice-2';
    const other = ublInvoice({ number: 'NS-1' }).replace(
      `<Invoice xmlns="${ns}"`,
      `<!-- ${ns} -->\n<Invoice xmlns="urn:example:not-ubl"`,
    );
    const err = k.expectB(await k.ingestXml(a, other), 502, 'invoice_parse_failed');
    expect(String(err['message'])).toMatch(/namespace/);
    // A prefixed root declaring the UBL namespace for its prefix is an invoice.
    const prefixed = ublInvoice({ number: 'NS-2' })
      .replace(`<Invoice xmlns="${ns}"`, `<inv:Invoice xmlns:inv="${ns}"`)
      .replace('</Invoice>', '</inv:Invoice>');
    expect(k.ok(await k.ingestXml(a, prefixed), 201).invoice_number).toBe('NS-2');
    // A prefixed root whose prefix is bound elsewhere is not, whatever the default namespace says.
    const wrongPrefix = ublInvoice({ number: 'NS-3' })
      .replace(`<Invoice xmlns="${ns}"`, `<inv:Invoice xmlns="${ns}" xmlns:inv="urn:example:other"`)
      .replace('</Invoice>', '</inv:Invoice>');
    k.expectB(await k.ingestXml(a, wrongPrefix), 502, 'invoice_parse_failed');
  });

  it('takes documents up to 1 MB and answers 413 payload_too_large above', async () => {
    const base = ublInvoice({ number: 'BIG', note: '' });
    const fill = 1024 * 1024 - Buffer.byteLength(base);
    const atLimit = ublInvoice({ number: 'BIG', note: 'x'.repeat(fill) });
    expect(Buffer.byteLength(atLimit)).toBe(1024 * 1024);
    k.ok(await k.ingestXml(a, atLimit), 201);
    const over = ublInvoice({ number: 'BIH', note: 'x'.repeat(fill + 1) });
    expect(Buffer.byteLength(over)).toBe(1024 * 1024 + 1);
    k.expectB(await k.ingestXml(a, over), 413, 'payload_too_large');
    // Other gateway routes keep their 512 KB limit.
    const big = await t.inject({
      method: 'POST',
      url: '/v1/gateway/payees',
      headers: { ...k.key(a), 'content-type': 'application/json' },
      payload: JSON.stringify({ details: { name: 'x'.repeat(600 * 1024) } }),
    });
    k.expectB(big as never, 413, 'payload_too_large');
  });
});

describe('capsules bound to invoices', () => {
  it('refuses a mint without an invoice under a pack that requires one, and binds payee and amount', async () => {
    const packId = await k.pack(a, PACK);
    const payee = await k.payee(a, PAYEE);
    const base = {
      entity_id: 'acme',
      pack_id: packId,
      rails: ['ach'],
      beneficiary: { payee_id: payee.id },
      amount_ceiling: { currency: 'USD', amount: '250.00' },
    };
    k.expectB(await k.mint(a, base), 400, 'invoice_hash_missing');
    const inv = k.ok(await k.ingestXml(a, ublInvoice({ number: 'BIND-1' })), 201);
    // Ceiling other than the invoice's amount, another payee: refused.
    k.expectB(
      await k.mint(a, {
        ...base,
        invoice_hash: inv.invoice_hash,
        amount_ceiling: { currency: 'USD', amount: '900' },
      }),
      403,
      'invoice_terms_mismatch',
    );
    const other = await k.payee(a, { name: 'Mallory', account_number: 'GB00 0000 1111' });
    k.expectB(
      await k.mint(a, { ...base, invoice_hash: inv.invoice_hash, beneficiary: { payee_id: other.id } }),
      403,
      'beneficiary_hash_mismatch',
    );
    // An unparsed invoice cannot be bound.
    const failed = k.expectB(await k.ingestXml(a, '<nope'), 502, 'invoice_parse_failed');
    k.expectB(
      await k.mint(a, { ...base, invoice_hash: failed['invoice_hash'] }),
      502,
      'invoice_parse_failed',
    );
    // Another organization's invoice does not exist for the caller.
    const packB = await k.pack(b, PACK);
    const payeeB = await k.payee(b, PAYEE);
    k.expectB(
      await k.mint(b, {
        ...base,
        pack_id: packB,
        beneficiary: { payee_id: payeeB.id },
        invoice_hash: inv.invoice_hash,
      }),
      404,
      'invoice_not_found',
    );

    // Two capsules for one invoice: the first consume pays it, the second answers invoice_already_consumed.
    const one = k.ok(await k.mint(a, { ...base, invoice_hash: inv.invoice_hash }), 201);
    const two = k.ok(await k.mint(a, { ...base, invoice_hash: inv.invoice_hash }), 201);
    const pay = (capsule: string, amount = '250.00') =>
      k.consume(a, {
        capsule,
        amount,
        currency: 'USD',
        rail: 'ach',
        beneficiary: PAYEE,
        invoice_hash: inv.invoice_hash,
      });
    k.expectB(await pay(one.capsule, '200.00'), 403, 'invoice_terms_mismatch');
    const unbound = k.ok(
      await k.mint(a, { ...base, pack_id: await k.pack(a, { ...PACK, invoice_required: false }) }),
      201,
    );
    const extra = k.expectB(
      await k.consume(a, {
        capsule: unbound.capsule,
        amount: '250.00',
        currency: 'USD',
        rail: 'ach',
        beneficiary: PAYEE,
        invoice_hash: inv.invoice_hash,
      }),
      400,
      'capsule_payload_invalid',
    );
    expect(extra['param']).toBe('invoice_hash');
    // A capsule that binds an invoice is consumed naming it.
    const { invoice_hash: _bound, ...withoutHash } = {
      capsule: one.capsule,
      amount: '250.00',
      currency: 'USD',
      rail: 'ach',
      beneficiary: PAYEE,
      invoice_hash: inv.invoice_hash,
    };
    expect(k.expectB(await k.consume(a, withoutHash), 400, 'capsule_payload_invalid')['param']).toBe(
      'invoice_hash',
    );
    const consumed = k.ok(await pay(one.capsule));
    expect(consumed.consumption.invoice_hash).toBe(inv.invoice_hash);
    k.expectB(await pay(two.capsule), 409, 'invoice_already_consumed');
    expect(k.ok(await k.inject('GET', `/v1/gateway/invoices/${inv.id}`, k.key(a)))).toMatchObject({
      capsule_id: one.id,
      consumed_at: consumed.consumption.consumed_at,
    });
    // Once paid, a new mint for it is refused too; the losing capsule stays unconsumed.
    k.expectB(await k.mint(a, { ...base, invoice_hash: inv.invoice_hash }), 409, 'invoice_already_consumed');
    expect(k.ok(await k.inject('GET', `/v1/gateway/capsules/${two.id}`, k.key(a))).status).toBe('active');
  });
});
