import type { CapsulePayload } from '@svc/capsules';
import { storableText } from '../../lib/storable.js';
import type { Db } from '../../storage/db.js';
import {
  flowError,
  type PaymentAnswer,
  type PaymentRow,
  type ProviderRow,
  type WorkflowRow,
} from './flow-model.js';
import { bindInvoiceForConsume, createInvoiceRepository } from './invoices.js';
import type { PackContent } from './model.js';
import {
  createPaymentRepository,
  createProviderRepository,
  LEDGER_RAIL,
  type ProviderClientDeps,
  type SendOutcome,
  sendPayment,
} from './providers.js';
import {
  checkWorkflowForConsume,
  createWorkflowRepository,
  holdWorkflow,
  moveWorkflowOnConsume,
  releaseWorkflow,
} from './workflows.js';

/**
 * What a consume does beyond the capsule itself: the invoice it pays, the workflow it moves, and
 * the hand-off of the payment to the provider the rail is routed to. The capsule service calls
 * these under the organization's spend-ledger lock.
 */
export interface ConsumeFlowDeps {
  client: ProviderClientDeps;
  /** How long a payment in flight holds its capsule beyond the provider's timeout. */
  leaseMarginMs: number;
}

/** How a rail is paid: on the ledger, by a provider, or by the paying side itself (authorized only). */
export type Route = { kind: 'ledger' } | { kind: 'provider'; provider: ProviderRow } | { kind: 'authorized' };

export interface FlowFacts {
  org: string;
  payload: CapsulePayload;
  amountMicros: number;
  currency: string;
  rail: string;
  invoiceHash: string | null;
  pack: PackContent;
  /** The project of the key that minted the capsule (null: minted by a person). */
  projectId: string | null;
}

/** The payment row a consume of this capsule continues, when one was started before. */
export interface Prepared {
  route: Route;
  workflow: WorkflowRow | null;
  payment: PaymentRow | undefined;
}

export async function routeOf(db: Db, org: string, rail: string): Promise<Route> {
  if (rail === LEDGER_RAIL) return { kind: 'ledger' };
  const provider = await createProviderRepository(db).byRail(org, rail);
  return provider ? { kind: 'provider', provider } : { kind: 'authorized' };
}

/**
 * Checks under the lock that the capsule's payment may start (or continue): no attempt in flight,
 * a retry of an attempt of unknown outcome repeats it exactly, the bound invoice and workflow allow
 * it (a retry is not held to the workflow's state: it asks for a payment already sent). Binds the
 * invoice and holds the workflow for the capsule. Answers the entity's open amount, which entity
 * caps count.
 */
export async function prepareConsume(
  db: Db,
  f: FlowFacts,
  now: string,
): Promise<Prepared & { openMicros: number }> {
  const payments = createPaymentRepository(db);
  const capsuleId = f.payload.capsule_id;
  const payment = await payments.get(f.org, capsuleId);
  let route = await routeOf(db, f.org, f.rail);
  if (payment?.state === 'pending' && payment.lease_until > now) {
    const seconds = Math.max(1, Math.ceil((Date.parse(payment.lease_until) - Date.parse(now)) / 1000));
    throw flowError.paymentInProgress(`a payment of capsule ${capsuleId} is in flight`, seconds);
  }
  // The provider may have executed this payment: its retry only asks for the outcome.
  const resuming = payment?.state === 'pending' || payment?.state === 'unknown';
  if (payment && resuming) {
    // The provider may have executed it: the retry must be the same payment, to the same provider.
    if (payment.rail !== f.rail || Number(payment.amount_micros) !== f.amountMicros) {
      throw flowError.paymentMismatch(
        `capsule ${capsuleId} has a payment of unknown outcome; retry it with the same amount and rail`,
        'amount',
      );
    }
    const provider = await createProviderRepository(db).get(f.org, payment.provider_id);
    if (!provider) {
      throw flowError.providerUpstream(
        `the provider of capsule ${capsuleId}'s earlier payment was removed; its outcome cannot be asked`,
      );
    }
    route = { kind: 'provider', provider };
  }
  if (route.kind === 'provider' && Number(route.provider.enabled) !== 1) {
    throw flowError.providerUpstream(`provider ${route.provider.name} (rail ${f.rail}) is disabled`);
  }
  if (f.invoiceHash !== null) {
    await bindInvoiceForConsume(db, f.org, f.invoiceHash, capsuleId, f.amountMicros, f.currency, now);
  }
  let workflow: WorkflowRow | null = null;
  if (f.payload.workflow_id !== undefined && resuming) {
    // A retry only asks for the outcome of a payment already sent: the workflow's state is no gate.
    // The first attempt's hold keeps the workflow in consume_from; one that left it anyway keeps its
    // state when the payment succeeds (see moveWorkflowOnConsume).
    workflow =
      (await createWorkflowRepository(db).get(f.org, f.payload.entity_id, f.payload.workflow_id)) ?? null;
  } else if (f.payload.workflow_id !== undefined) {
    workflow = await checkWorkflowForConsume(
      db,
      f.org,
      f.payload.entity_id,
      f.payload.workflow_id,
      capsuleId,
      f.projectId,
    );
    if (route.kind === 'provider') await holdWorkflow(db, f.org, workflow, capsuleId, now);
  }
  const openMicros = await payments.openAmount(f.org, f.payload.entity_id, capsuleId);
  return { route, workflow, payment, openMicros };
}

/**
 * Starts (or retakes) the provider attempt: the payment row goes to `pending` with a lease. The
 * idempotency key is kept across attempts unless the last one was refused for certain.
 */
export async function startAttempt(
  db: Db,
  deps: ConsumeFlowDeps,
  f: FlowFacts,
  prepared: Prepared & { route: { kind: 'provider' } },
  request: string,
  now: string,
): Promise<PaymentRow> {
  const payments = createPaymentRepository(db);
  const provider = prepared.route.provider;
  const lease = new Date(Date.parse(now) + Number(provider.timeout_ms) + deps.leaseMarginMs).toISOString();
  const capsuleId = f.payload.capsule_id;
  const old = prepared.payment;
  if (!old) {
    const row: PaymentRow = {
      organization_id: f.org,
      capsule_id: capsuleId,
      entity_id: f.payload.entity_id,
      provider_id: provider.id,
      rail: f.rail,
      amount_micros: f.amountMicros,
      request,
      idempotency_key: `capsule-${capsuleId}-1`,
      state: 'pending',
      attempts: 1,
      lease_until: lease,
      reference: null,
      last_error: null,
      created_at: now,
      updated_at: now,
    };
    await payments.insert(row);
    return row;
  }
  if (old.state === 'succeeded') {
    throw flowError.paymentMismatch(`capsule ${capsuleId} was already paid (${old.reference})`, 'capsule');
  }
  const fresh = old.state === 'failed';
  const next: PaymentRow = {
    ...old,
    provider_id: provider.id,
    rail: f.rail,
    amount_micros: fresh ? f.amountMicros : Number(old.amount_micros),
    request: fresh ? request : old.request,
    idempotency_key: fresh ? `capsule-${capsuleId}-${old.attempts + 1}` : old.idempotency_key,
    state: 'pending',
    attempts: old.attempts + 1,
    lease_until: lease,
    updated_at: now,
  };
  if (!(await payments.move(f.org, old, next))) {
    throw flowError.paymentInProgress(`a payment of capsule ${capsuleId} is in flight`, 1);
  }
  return next;
}

/** Posts the attempt to its provider. */
export const sendAttempt = (deps: ConsumeFlowDeps, provider: ProviderRow, attempt: PaymentRow) =>
  sendPayment(deps.client, provider, attempt.idempotency_key, attempt.request);

/**
 * Ends an attempt that did not succeed, under the organization's spend-ledger lock (as the other
 * steps of a consume), compare-and-set on the attempt so an attempt taken over after its lease
 * changes nothing:
 * - `not_sent` (nothing reached the provider): the payment row goes back to what it was before this
 *   attempt (none, `failed`, `unknown` or an expired `pending`), with its key;
 * - `refused` of the first send of a key (a key issued for this very attempt): `failed`, and the next
 *   attempt gets a new key;
 * - anything else, including a refusal of a key sent before (the provider may have executed an
 *   earlier send): `unknown`, keeping the key.
 * The invoice and workflow are let go only when the move succeeded and no key of the capsule may
 * have reached the provider. The capsule stays unconsumed either way; no spend counts.
 */
export async function endAttempt(
  db: Db,
  org: string,
  attempt: PaymentRow,
  previous: PaymentRow | undefined,
  outcome: Exclude<SendOutcome, { kind: 'succeeded' }>,
  facts: FlowFacts,
  now: string,
): Promise<void> {
  const payments = createPaymentRepository(db);
  // The key of this attempt was issued for it: no earlier send of it exists.
  const freshKey = !previous || previous.state === 'failed';
  // The message quotes the provider's answer: kept as text both stores hold.
  const error = storableText(`${outcome.error.body.code}: ${outcome.error.body.message}`);
  let moved: boolean;
  if (outcome.kind === 'not_sent') {
    moved = previous
      ? await payments.move(org, attempt, {
          provider_id: previous.provider_id,
          rail: previous.rail,
          amount_micros: previous.amount_micros,
          request: previous.request,
          idempotency_key: previous.idempotency_key,
          state: previous.state,
          attempts: previous.attempts,
          lease_until: previous.lease_until,
          reference: previous.reference,
          last_error: error,
          updated_at: now,
        })
      : await payments.remove(org, attempt);
  } else {
    moved = await payments.move(org, attempt, {
      state: outcome.kind === 'refused' && freshKey ? 'failed' : 'unknown',
      last_error: error,
      updated_at: now,
    });
  }
  // Only a capsule none of whose keys may have reached the provider lets go of what it binds.
  const release = moved && freshKey && (outcome.kind === 'refused' || outcome.kind === 'not_sent');
  if (!release) return;
  const capsuleId = facts.payload.capsule_id;
  if (facts.invoiceHash !== null) {
    await createInvoiceRepository(db).unbind(org, facts.invoiceHash, capsuleId, now);
  }
  if (facts.payload.workflow_id !== undefined) {
    await releaseWorkflow(db, org, facts.payload.entity_id, facts.payload.workflow_id, capsuleId);
  }
}

/**
 * The part of the spending commit that belongs to the flow: the attempt's success (compare-and-set,
 * so a payment is committed once), the invoice marked paid, the workflow moved.
 */
export async function commitFlow(
  db: Db,
  f: FlowFacts,
  route: Route,
  workflow: WorkflowRow | null,
  attempt: PaymentRow | null,
  reference: string | null,
  ledgerEntryId: string,
  now: string,
): Promise<PaymentAnswer> {
  const capsuleId = f.payload.capsule_id;
  if (attempt) {
    const moved = await createPaymentRepository(db).move(f.org, attempt, {
      state: 'succeeded',
      reference,
      last_error: null,
      updated_at: now,
    });
    if (!moved) throw flowError.paymentInProgress(`the payment of capsule ${capsuleId} was taken over`, 1);
  }
  if (f.invoiceHash !== null)
    await createInvoiceRepository(db).markConsumed(f.org, f.invoiceHash, capsuleId, now);
  const settled = route.kind === 'ledger';
  // After a provider's success the money moved: the workflow's move never refuses the commit.
  if (workflow) await moveWorkflowOnConsume(db, f.org, workflow, capsuleId, settled, now, attempt !== null);
  return {
    rail: f.rail,
    provider_id: route.kind === 'provider' ? route.provider.id : null,
    reference:
      reference ?? (route.kind === 'ledger' ? `ledger:${ledgerEntryId}` : `authorization:${capsuleId}`),
    state: route.kind === 'provider' ? 'succeeded' : settled ? 'settled' : 'authorized',
    attempts: attempt?.attempts ?? 0,
  };
}
