import { type BeneficiaryDetails, beneficiaryHash } from '@svc/capsules';
import type { Kysely } from 'kysely';
import type { Clock } from '../../lib/clock.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Db } from '../../storage/db.js';
import {
  type FlowTables,
  flowError,
  type InvoiceAnswer,
  type InvoiceFormat,
  type InvoiceRow,
  type InvoiceTerms,
} from './flow-model.js';
import {
  documentHash,
  InvoiceParseError,
  invoiceHash,
  type JsonInvoice,
  termsOfJson,
  termsOfUbl,
} from './invoice-parse.js';
import { gatewayError } from './model.js';
import { moneyMicros, toMicros } from './money.js';

type F = Kysely<FlowTables>;
const view = (db: Db): F => db.withTables<FlowTables>() as unknown as F;

/** Invoices of one organization; every method takes it. */
export function createInvoiceRepository(base: Db) {
  const db = view(base);
  return {
    /** Inserts, or answers the row already kept under the same hash. */
    async insert(row: InvoiceRow): Promise<{ row: InvoiceRow; created: boolean }> {
      const r = await db
        .insertInto('gateway_invoices')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'invoice_hash']).doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0) === 1) return { row, created: true };
      const existing = await this.byHash(row.organization_id, row.invoice_hash);
      if (!existing) throw new Error('invoice vanished while ingesting');
      return { row: existing, created: false };
    },
    async byId(org: string, id: string) {
      return db
        .selectFrom('gateway_invoices')
        .selectAll()
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .executeTakeFirst();
    },
    async byHash(org: string, hash: string) {
      return db
        .selectFrom('gateway_invoices')
        .selectAll()
        .where('organization_id', '=', org)
        .where('invoice_hash', '=', hash)
        .executeTakeFirst();
    },
    /**
     * Binds the invoice to the capsule paying it; false when another capsule holds it. A capsule
     * that already holds it (a retried payment) binds again.
     */
    async bind(org: string, hash: string, capsuleId: string, at: string): Promise<boolean> {
      const r = await db
        .updateTable('gateway_invoices')
        .set({ capsule_id: capsuleId, updated_at: at })
        .where('organization_id', '=', org)
        .where('invoice_hash', '=', hash)
        .where((eb) => eb.or([eb('capsule_id', 'is', null), eb('capsule_id', '=', capsuleId)]))
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },
    async markConsumed(org: string, hash: string, capsuleId: string, at: string): Promise<void> {
      await db
        .updateTable('gateway_invoices')
        .set({ consumed_at: at, updated_at: at })
        .where('organization_id', '=', org)
        .where('invoice_hash', '=', hash)
        .where('capsule_id', '=', capsuleId)
        .execute();
    },
    /** Frees an invoice held by a payment the provider refused for certain. */
    async unbind(org: string, hash: string, capsuleId: string, at: string): Promise<void> {
      await db
        .updateTable('gateway_invoices')
        .set({ capsule_id: null, updated_at: at })
        .where('organization_id', '=', org)
        .where('invoice_hash', '=', hash)
        .where('capsule_id', '=', capsuleId)
        .where('consumed_at', 'is', null)
        .execute();
    },
  };
}

export type InvoiceRepository = ReturnType<typeof createInvoiceRepository>;

export const termsOf = (row: InvoiceRow): InvoiceTerms | null =>
  row.terms ? (JSON.parse(row.terms) as InvoiceTerms) : null;

export function invoiceAnswer(row: InvoiceRow): InvoiceAnswer {
  const t = termsOf(row);
  return {
    id: row.id,
    invoice_hash: row.invoice_hash,
    format: row.format,
    status: row.status,
    invoice_number: t?.invoice_number ?? null,
    issue_date: t?.issue_date ?? null,
    due_date: t?.due_date ?? null,
    payee: t?.payee ?? null,
    beneficiary_hash: row.beneficiary_hash,
    amount: t?.amount ?? null,
    parse_error: row.parse_error,
    capsule_id: row.capsule_id,
    consumed_at: row.consumed_at,
    created_at: row.created_at,
  };
}

type Caller = Pick<OrgScope, 'organizationId' | 'projectId'>;

/** Ingest and read invoices. An invoice is the organization's: it is paid once, whichever project pays. */
export function createInvoiceService(deps: { repo: InvoiceRepository; clock: Clock }) {
  const { repo } = deps;

  async function keep(
    scope: Caller,
    format: InvoiceFormat,
    document: string,
    parsed: { terms: InvoiceTerms } | { error: string },
  ) {
    const at = deps.clock.now().toISOString();
    const ok = 'terms' in parsed;
    return repo.insert({
      organization_id: scope.organizationId,
      id: uuidv7(),
      project_id: scope.projectId,
      invoice_hash: ok ? invoiceHash(parsed.terms) : documentHash(document),
      format,
      status: ok ? 'parsed' : 'parse_failed',
      document,
      terms: ok ? JSON.stringify(parsed.terms) : null,
      beneficiary_hash: ok
        ? await beneficiaryHash(parsed.terms.payee as unknown as BeneficiaryDetails)
        : null,
      parse_error: ok ? null : parsed.error,
      capsule_id: null,
      consumed_at: null,
      created_at: at,
      updated_at: at,
    });
  }

  const failed = (row: InvoiceRow) =>
    flowError.invoiceParseFailed(
      `the invoice could not be parsed: ${row.parse_error}`,
      row.id,
      row.invoice_hash,
    );

  return {
    /** A structured invoice; the same terms ingested again answer the kept invoice (created false). */
    async ingestJson(scope: Caller, input: JsonInvoice) {
      const terms = termsOfJson(input);
      const { row, created } = await keep(scope, 'json', JSON.stringify(input), { terms });
      return { invoice: invoiceAnswer(row), created };
    },

    /** A UBL 2.1 document; one that does not parse is kept as parse_failed and answers 502. */
    async ingestUbl(scope: Caller, document: string) {
      let parsed: { terms: InvoiceTerms } | { error: string };
      try {
        parsed = { terms: termsOfUbl(document) };
      } catch (err) {
        if (!(err instanceof InvoiceParseError)) throw err;
        parsed = { error: err.message };
      }
      const { row, created } = await keep(scope, 'ubl', document, parsed);
      if (row.status === 'parse_failed') throw failed(row);
      return { invoice: invoiceAnswer(row), created };
    },

    async get(scope: Caller, idOrHash: string): Promise<InvoiceAnswer> {
      const row = idOrHash.startsWith('sha256:')
        ? await repo.byHash(scope.organizationId, idOrHash)
        : await repo.byId(scope.organizationId, idOrHash);
      if (!row) throw flowError.invoiceNotFound(`invoice ${idOrHash} not found`, 'id');
      return invoiceAnswer(row);
    },

    /**
     * The invoice a mint binds: parsed, not yet paid, payable to the capsule's beneficiary, in the
     * ceiling's currency and for exactly the ceiling's amount (a capsule never pays more than the
     * invoice asks, and an invoice is paid once, so never less either).
     */
    async checkMint(
      org: string,
      hash: string,
      beneficiary: string,
      ceiling: { currency: string; amount: string },
    ): Promise<InvoiceRow> {
      const row = await repo.byHash(org, hash);
      if (!row) {
        throw flowError.invoiceNotFound(
          `invoice ${hash} was not ingested`,
          'invoice_hash',
          'POST the invoice to /v1/gateway/invoices first',
        );
      }
      if (row.status === 'parse_failed') throw failed(row);
      if (row.consumed_at !== null) {
        throw flowError.invoiceAlreadyConsumed(
          `invoice ${hash} was already paid by capsule ${row.capsule_id}`,
          'invoice_hash',
        );
      }
      const terms = termsOf(row)!;
      if (row.beneficiary_hash !== beneficiary) {
        throw gatewayError.hashMismatch(
          "the invoice's payee does not hash to the capsule's beneficiary",
          'beneficiary',
        );
      }
      if (
        terms.amount.currency !== ceiling.currency ||
        toMicros(terms.amount.amount, 'invoice.amount') !== moneyMicros(ceiling, 'amount_ceiling')
      ) {
        throw flowError.invoiceMismatch(
          `the invoice asks for ${terms.amount.amount} ${terms.amount.currency}; amount_ceiling must be exactly that`,
          'amount_ceiling',
        );
      }
      return row;
    },
  };
}

/**
 * Checks under the spend-ledger lock that the invoice can be paid by this capsule with this amount,
 * and binds it to the capsule (so no other capsule pays it, even while a provider is answering).
 */
export async function bindInvoiceForConsume(
  db: Db,
  org: string,
  hash: string,
  capsuleId: string,
  amountMicros: number,
  currency: string,
  at: string,
): Promise<void> {
  const repo = createInvoiceRepository(db);
  const row = await repo.byHash(org, hash);
  if (row?.status !== 'parsed') {
    throw flowError.invoiceNotFound(`invoice ${hash} is not a parsed invoice`, 'invoice_hash');
  }
  if (row.capsule_id !== null && row.capsule_id !== capsuleId) {
    throw flowError.invoiceAlreadyConsumed(
      row.consumed_at
        ? `invoice ${hash} was already paid by capsule ${row.capsule_id}`
        : `invoice ${hash} is being paid by capsule ${row.capsule_id}`,
      'invoice_hash',
    );
  }
  const terms = termsOf(row)!;
  if (terms.amount.currency !== currency || toMicros(terms.amount.amount, 'invoice') !== amountMicros) {
    throw flowError.invoiceMismatch(
      `the invoice asks for ${terms.amount.amount} ${terms.amount.currency}; a payment of it must be exactly that`,
      'amount',
    );
  }
  if (!(await repo.bind(org, hash, capsuleId, at))) {
    throw flowError.invoiceAlreadyConsumed(
      `invoice ${hash} is being paid by another capsule`,
      'invoice_hash',
    );
  }
}

export type InvoiceService = ReturnType<typeof createInvoiceService>;
