import {
  type BeneficiaryDetails,
  normalizeBeneficiary,
  normalizedName,
  precisionProblem,
} from '@svc/capsules';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { hashJson, sha256Tagged } from '../../ledger/canonical.js';
import type { InvoiceTerms } from './flow-model.js';
import { gatewayError } from './model.js';
import { fromMicros, GATEWAY_CURRENCIES, gatewayPays, toMicros } from './money.js';

/** UBL 2.1 invoice namespace: a document whose root is another element is not an invoice. */
export const UBL_INVOICE_NS = 'urn:oasis:names:specification:ubl:schema:xsd:Invoice-2';

const DATE = /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/;
const CURRENCY = /^[A-Z]{3,5}$/;

/** Why a document could not be read as an invoice (kept on its parse_failed row). */
export class InvoiceParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvoiceParseError';
  }
}

/** The structured JSON invoice (POST /v1/gateway/invoices with Content-Type application/json). */
export interface JsonInvoice {
  invoice_number: string;
  issue_date?: string;
  due_date?: string;
  payee: BeneficiaryDetails;
  amount: { currency: string; amount: string };
}

/** The canonical invoice_hash: sha256 of the RFC 8785 JSON of the parsed terms, whatever the format. */
export const invoiceHash = (terms: InvoiceTerms): string => hashJson(terms);

/** The hash a document that could not be parsed is kept under: sha256 of its bytes. */
export const documentHash = (document: string): string => sha256Tagged(document);

/** Terms of a structured invoice; a bad member is the caller's (400 with its name as param). */
export function termsOfJson(input: JsonInvoice): InvoiceTerms {
  const bad = (param: string, message: string) => gatewayError.invalidRequest(`${param} ${message}`, param);
  for (const d of ['issue_date', 'due_date'] as const) {
    const v = input[d];
    if (v !== undefined && !DATE.test(v)) throw bad(d, 'must be a date YYYY-MM-DD');
  }
  if (!gatewayPays(input.amount.currency)) {
    throw bad('amount.currency', `must be one of ${GATEWAY_CURRENCIES.join(', ')}`);
  }
  let payee: Record<string, string>;
  try {
    payee = normalizeBeneficiary(input.payee);
  } catch (err) {
    throw bad('payee', (err as Error).message);
  }
  return {
    invoice_number: input.invoice_number.trim(),
    issue_date: input.issue_date ?? null,
    due_date: input.due_date ?? null,
    payee,
    amount: payableAmount(input.amount.currency, input.amount.amount, 'amount.amount'),
  };
}

/**
 * The amount in its canonical form, under the rules of every other gateway amount (money.ts): no more
 * decimal places than its currency has (invalid_amount_precision: a USD invoice of 12.345 could never
 * be paid by a capsule), a plain decimal up to 1000000000, and more than 0 (a capsule's ceiling must
 * be more than 0 and exactly the invoice's amount, so an invoice of nothing could never be paid).
 * Zeros past the currency's places change nothing: 12.500 USD is 12.5.
 */
function payableAmount(
  currency: string,
  amount: string,
  param: string,
): { currency: string; amount: string } {
  const trimmed = /^\d+\.\d+$/.test(amount) ? amount.replace(/\.?0+$/, '') : amount;
  const problem = /^\d+(\.\d+)?$/.test(trimmed) ? precisionProblem({ currency, amount: trimmed }) : null;
  if (problem) throw gatewayError.precision(`${param} ${amount}: ${problem}`, param);
  const micros = toMicros(trimmed, param);
  if (micros === 0) throw gatewayError.invalidRequest(`${param} must be greater than 0`, param);
  return { currency, amount: fromMicros(micros) };
}

// The parser expands no entity and DOCTYPEs are refused before parsing: no entity expansion
// (billion laughs) and no external reference (XXE) can happen, whatever the document says. The
// values read are then decoded of XML's predefined entities and character references only (see
// `decodeXml`); any other entity reference stays inert text.
const options = {
  ignoreAttributes: false,
  attributeNamePrefix: '@_',
  processEntities: false,
  htmlEntities: false,
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true,
  ignoreDeclaration: true,
  ignorePiTags: true,
} as const;
const parser = new XMLParser({ ...options, removeNSPrefix: true });
/** Keeps prefixes and namespace declarations: the root element's own namespace is read from it. */
const rawParser = new XMLParser({ ...options, removeNSPrefix: false });

const PREDEFINED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

/**
 * Decodes XML's five predefined entities and character references (`&#38;`, `&#x26;`) in one pass,
 * so `&amp;lt;` is `&lt;` as text; other entity references stay as written (no DTD defines them).
 */
export function decodeXml(value: string): string {
  return value.replace(/&(amp|lt|gt|quot|apos|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});/g, (_, ref: string) => {
    if (ref[0] !== '#') return PREDEFINED[ref]!;
    const code = ref[1] === 'x' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
    // XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
    const ok =
      code === 0x9 ||
      code === 0xa ||
      code === 0xd ||
      (code >= 0x20 && code <= 0xd7ff) ||
      (code >= 0xe000 && code <= 0xfffd) ||
      (code >= 0x10000 && code <= 0x10ffff);
    if (!ok) throw new InvoiceParseError(`character reference &${ref}; is not an XML character`);
    return String.fromCodePoint(code);
  });
}

type Node = Record<string, unknown>;
const one = (v: unknown): unknown => (Array.isArray(v) ? v[0] : v);
const child = (node: unknown, ...path: string[]): unknown => {
  let at: unknown = node;
  for (const name of path) {
    const n = one(at);
    if (n === null || typeof n !== 'object') return undefined;
    at = (n as Node)[name];
  }
  return one(at);
};
/** Text of an element (plain, or `#text` next to attributes); undefined when absent or empty. */
const text = (node: unknown, ...path: string[]): string | undefined => {
  const v = child(node, ...path);
  const s = typeof v === 'string' ? v : v && typeof v === 'object' ? (v as Node)['#text'] : undefined;
  if (typeof s !== 'string') return undefined;
  const decoded = decodeXml(s).trim();
  return decoded !== '' ? decoded : undefined;
};

/**
 * Elements read that UBL 2.1 allows once (the first PaymentMeans being the one read, as several
 * may be given): a document repeating one (two PayableAmount, two cbc:ID) says two things, and
 * which of them another reader takes cannot be known, so it is not read at all.
 */
const SINGLE = [
  ['ID'],
  ['IssueDate'],
  ['DueDate'],
  ['PayeeParty'],
  ['AccountingSupplierParty'],
  ['AccountingSupplierParty', 'Party'],
  ['PaymentMeans', 'PaymentDueDate'],
  ['PaymentMeans', 'PayeeFinancialAccount'],
  ['PaymentMeans', 'PayeeFinancialAccount', 'ID'],
  ['PaymentMeans', 'PayeeFinancialAccount', 'FinancialInstitutionBranch'],
  ['PaymentMeans', 'PayeeFinancialAccount', 'FinancialInstitutionBranch', 'ID'],
  ['LegalMonetaryTotal'],
  ['LegalMonetaryTotal', 'PayableAmount'],
] as const;

/** The same, within a party whose name and country are read (the payee, or the supplier). */
const PARTY_SINGLE = [
  ['PartyName', 'Name'],
  ['PartyLegalEntity', 'RegistrationName'],
  ['PostalAddress'],
  ['PostalAddress', 'Country'],
  ['PostalAddress', 'Country', 'IdentificationCode'],
] as const;

function refuseRepeated(node: unknown, paths: readonly (readonly string[])[], under = ''): void {
  for (const path of paths) {
    // The element at the end of the path, under the first of each element before it.
    const parent = path.length > 1 ? child(node, ...path.slice(0, -1)) : one(node);
    if (parent === null || typeof parent !== 'object') continue;
    const found = (parent as Node)[path[path.length - 1]!];
    if (Array.isArray(found) && found.length > 1) {
      throw new InvoiceParseError(`${under}${path.join('/')} appears more than once; UBL 2.1 allows it once`);
    }
  }
}

/**
 * A party may have several PartyName and PartyLegalEntity (UBL allows them), of which the first is
 * read: they must then name the same party, or which name counts cannot be known.
 */
function refuseDifferingNames(party: unknown, under: string): void {
  const p = one(party);
  if (p === null || typeof p !== 'object') return;
  for (const [element, name] of [
    ['PartyName', 'Name'],
    ['PartyLegalEntity', 'RegistrationName'],
  ] as const) {
    const all = (p as Node)[element];
    if (!Array.isArray(all)) continue;
    // Compared as the payee's name is hashed.
    const names = new Set(
      all
        .map((e) => text(e, name))
        .filter((n) => n !== undefined)
        .map(normalizedName),
    );
    if (names.size > 1) {
      throw new InvoiceParseError(`${under}${element} gives different names (${[...names].join(', ')})`);
    }
  }
}

function refuseAmbiguousParty(party: unknown, under: string): void {
  refuseRepeated(party, PARTY_SINGLE, under);
  refuseDifferingNames(party, under);
}

/** Terms of a UBL 2.1 invoice; anything unreadable throws InvoiceParseError. */
export function termsOfUbl(document: string): InvoiceTerms {
  if (/<!DOCTYPE|<!ENTITY/i.test(document)) {
    throw new InvoiceParseError('document type declarations (DTD, entities) are not accepted');
  }
  const valid = XMLValidator.validate(document);
  if (valid !== true) {
    throw new InvoiceParseError(
      `not well-formed XML at line ${valid.err.line}, column ${valid.err.col}: ${valid.err.msg}`,
    );
  }
  let tree: Node;
  try {
    tree = parser.parse(document) as Node;
  } catch (err) {
    throw new InvoiceParseError(`XML does not parse: ${(err as Error).message}`);
  }
  const invoice = one(tree.Invoice) as Node | undefined;
  if (!invoice || typeof invoice !== 'object') {
    const root = Object.keys(tree)[0] ?? '(none)';
    throw new InvoiceParseError(`the root element is ${root}, not a UBL Invoice`);
  }
  // The root element's own namespace: the xmlns declaration (default, or of its prefix) on it.
  const raw = rawParser.parse(document) as Node;
  const rootName = Object.keys(raw).find((n) => n.split(':').pop() === 'Invoice');
  const rootNode = rootName === undefined ? undefined : one(raw[rootName]);
  const prefix = rootName?.includes(':') ? rootName.slice(0, rootName.indexOf(':')) : null;
  const declared =
    rootNode && typeof rootNode === 'object'
      ? (rootNode as Node)[prefix === null ? '@_xmlns' : `@_xmlns:${prefix}`]
      : undefined;
  if (typeof declared !== 'string' || decodeXml(declared).trim() !== UBL_INVOICE_NS) {
    throw new InvoiceParseError(`the Invoice element is not in the UBL 2.1 namespace ${UBL_INVOICE_NS}`);
  }
  refuseRepeated(invoice, SINGLE);
  const need = (value: string | undefined, what: string): string => {
    if (value === undefined) throw new InvoiceParseError(`the invoice has no ${what}`);
    return value;
  };
  const invoiceNumber = need(text(invoice, 'ID'), 'cbc:ID (invoice number)');
  // The party paid is PayeeParty when given, else the supplier.
  const supplier = child(invoice, 'AccountingSupplierParty', 'Party');
  const payeeParty = child(invoice, 'PayeeParty');
  const party = payeeParty ?? supplier;
  // The names and countries read must each say one thing too (the supplier's country is read when
  // the payee has none).
  if (payeeParty !== undefined) refuseAmbiguousParty(payeeParty, 'PayeeParty/');
  if (supplier !== undefined) refuseAmbiguousParty(supplier, 'AccountingSupplierParty/Party/');
  const name = need(
    text(party, 'PartyName', 'Name') ?? text(party, 'PartyLegalEntity', 'RegistrationName'),
    'payee name (PartyName/Name or PartyLegalEntity/RegistrationName)',
  );
  const account = need(
    text(invoice, 'PaymentMeans', 'PayeeFinancialAccount', 'ID'),
    'payee account (PaymentMeans/PayeeFinancialAccount/ID)',
  );
  const branch = text(invoice, 'PaymentMeans', 'PayeeFinancialAccount', 'FinancialInstitutionBranch', 'ID');
  const country =
    text(party, 'PostalAddress', 'Country', 'IdentificationCode') ??
    text(invoice, 'AccountingSupplierParty', 'Party', 'PostalAddress', 'Country', 'IdentificationCode');
  const payable = child(invoice, 'LegalMonetaryTotal', 'PayableAmount');
  const amount = need(
    text(invoice, 'LegalMonetaryTotal', 'PayableAmount'),
    'LegalMonetaryTotal/PayableAmount',
  );
  const currency = need(
    payable && typeof payable === 'object' && typeof (payable as Node)['@_currencyID'] === 'string'
      ? decodeXml((payable as Node)['@_currencyID'] as string)
      : undefined,
    'currencyID on PayableAmount',
  ).trim();
  if (!CURRENCY.test(currency)) throw new InvoiceParseError(`currencyID ${currency} is not a currency code`);
  if (!gatewayPays(currency)) {
    throw new InvoiceParseError(
      `currencyID ${currency} is not a currency the gateway pays (${GATEWAY_CURRENCIES.join(', ')})`,
    );
  }
  const dates = {
    issue: text(invoice, 'IssueDate'),
    due: text(invoice, 'DueDate') ?? text(invoice, 'PaymentMeans', 'PaymentDueDate'),
  };
  for (const [what, v] of Object.entries(dates)) {
    if (v !== undefined && !DATE.test(v)) throw new InvoiceParseError(`${what} date ${v} is not YYYY-MM-DD`);
  }
  let payee: Record<string, string>;
  let canonical: string;
  try {
    payee = normalizeBeneficiary({
      name,
      account_number: account,
      ...(branch ? { routing_number: branch } : {}),
      ...(country ? { country } : {}),
    });
    canonical = payableAmount(currency, amount, 'PayableAmount').amount;
  } catch (err) {
    throw new InvoiceParseError((err as Error).message);
  }
  return {
    invoice_number: invoiceNumber,
    issue_date: dates.issue ?? null,
    due_date: dates.due ?? null,
    payee,
    amount: { currency, amount: canonical },
  };
}
