import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** How the provider answers a path: pays, refuses (402), fails (500), rate-limits (429) or never answers. */
export type ProviderMode = 'ok' | 'refuse' | 'fail' | 'limited' | 'never';

export interface ProviderRequest {
  path: string;
  idempotencyKey: string | undefined;
  authorization: string | undefined;
  body: Record<string, unknown>;
}

/**
 * A payment provider on 127.0.0.1 for tests: each path has a mode; a paying answer is
 * idempotent on the Idempotency-Key (the same key answers the same reference and pays nothing
 * again), as providers that take such keys do. `beforeAnswer` runs after a payment was made (or
 * refused) and before its answer is sent (a test stops the service there).
 */
export class TestPaymentProvider {
  readonly requests: ProviderRequest[] = [];
  /** When set, the raw body of the next `fail` answer (as a provider might send it). */
  nextFailure: string | null = null;
  /** When set, the reference the next new payment answers (as a provider might send it). */
  nextReference: string | null = null;
  /** Payments made: idempotency key → reference. */
  readonly payments = new Map<string, string>();
  readonly modes = new Map<string, ProviderMode>();
  beforeAnswer: ((req: ProviderRequest) => Promise<void>) | null = null;
  private server: Server | null = null;
  private hanging: ServerResponse[] = [];
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      void this.handle(req, res);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The URL of a path answering in `mode`. */
  endpoint(path: string, mode: ProviderMode): string {
    this.modes.set(`/${path}`, mode);
    return `${this.url}/${path}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const path = (req.url ?? '/').split('?')[0]!;
    const seen: ProviderRequest = {
      path,
      idempotencyKey: req.headers['idempotency-key'] as string | undefined,
      authorization: req.headers.authorization,
      body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'),
    };
    this.requests.push(seen);
    const mode = this.modes.get(path) ?? 'fail';
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    switch (mode) {
      case 'never':
        this.hanging.push(res);
        return;
      case 'refuse':
        if (this.beforeAnswer) await this.beforeAnswer(seen);
        return json(402, { error: 'insufficient_funds' });
      case 'fail': {
        const raw = this.nextFailure;
        this.nextFailure = null;
        if (raw !== null) {
          res.writeHead(500, { 'content-type': 'text/plain' }).end(raw);
          return;
        }
        return json(500, { error: 'ledger unavailable' });
      }
      case 'limited':
        return json(429, { error: 'slow down' }, { 'retry-after': '7' });
      case 'ok': {
        const key = seen.idempotencyKey ?? randomUUID();
        let reference = this.payments.get(key);
        if (!reference) {
          reference = this.nextReference ?? `pay_${this.payments.size + 1}_${randomUUID().slice(0, 8)}`;
          this.nextReference = null;
          this.payments.set(key, reference);
        }
        if (this.beforeAnswer) await this.beforeAnswer(seen);
        if (!res.destroyed) json(200, { reference, status: 'accepted' });
        return;
      }
    }
  }

  async stop(): Promise<void> {
    for (const r of this.hanging) r.destroy();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

/** A UBL 2.1 invoice with the given number, payee, amount and padding (a long note). */
export function ublInvoice(
  o: {
    number?: string;
    name?: string;
    iban?: string;
    country?: string;
    amount?: string;
    currency?: string;
    due?: string;
    note?: string;
  } = {},
): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
  xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
  xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">
  <cbc:UBLVersionID>2.1</cbc:UBLVersionID>
  <cbc:ID>${o.number ?? 'INV-1001'}</cbc:ID>
  <cbc:IssueDate>2026-11-01</cbc:IssueDate>
  <cbc:DueDate>${o.due ?? '2026-12-01'}</cbc:DueDate>
  <cbc:InvoiceTypeCode>380</cbc:InvoiceTypeCode>${o.note !== undefined ? `\n  <cbc:Note>${o.note}</cbc:Note>` : ''}
  <cbc:DocumentCurrencyCode>${o.currency ?? 'USD'}</cbc:DocumentCurrencyCode>
  <cac:AccountingSupplierParty>
    <cac:Party>
      <cac:PartyName><cbc:Name>${o.name ?? 'ACME Supplies'}</cbc:Name></cac:PartyName>
      <cac:PostalAddress><cac:Country><cbc:IdentificationCode>${o.country ?? 'DE'}</cbc:IdentificationCode></cac:Country></cac:PostalAddress>
    </cac:Party>
  </cac:AccountingSupplierParty>
  <cac:AccountingCustomerParty>
    <cac:Party><cac:PartyName><cbc:Name>Buyer Ltd</cbc:Name></cac:PartyName></cac:Party>
  </cac:AccountingCustomerParty>
  <cac:PaymentMeans>
    <cbc:PaymentMeansCode>58</cbc:PaymentMeansCode>
    <cac:PayeeFinancialAccount><cbc:ID>${o.iban ?? 'DE89 3704 0044 0532 0130 00'}</cbc:ID></cac:PayeeFinancialAccount>
  </cac:PaymentMeans>
  <cac:LegalMonetaryTotal>
    <cbc:LineExtensionAmount currencyID="${o.currency ?? 'USD'}">${o.amount ?? '250.00'}</cbc:LineExtensionAmount>
    <cbc:PayableAmount currencyID="${o.currency ?? 'USD'}">${o.amount ?? '250.00'}</cbc:PayableAmount>
  </cac:LegalMonetaryTotal>
</Invoice>
`;
}

/** The classic entity-expansion bomb: ten levels of ten references each. */
export const BILLION_LAUGHS = `<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"><ID>&lol9;</ID></Invoice>
`;
