import type { EnvelopeBError } from '../../lib/envelope-b.js';
import { GatewayError } from './model.js';

/**
 * Types of what surrounds a payment: the invoice it pays, the workflow it moves, the provider that
 * executes it and the payment handed to that provider (migration 0018).
 */
export type FlowTables = {
  gateway_invoices: {
    organization_id: string;
    id: string;
    project_id: string | null;
    invoice_hash: string;
    format: InvoiceFormat;
    status: InvoiceStatus;
    document: string;
    terms: string | null;
    beneficiary_hash: string | null;
    parse_error: string | null;
    capsule_id: string | null;
    consumed_at: string | null;
    created_at: string;
    updated_at: string;
  };
  gateway_workflows: {
    organization_id: string;
    entity_id: string;
    workflow_id: string;
    project_id: string | null;
    pack_id: string | null;
    map: string;
    state: string;
    capsule_id: string | null;
    history: string;
    created_at: string;
    updated_at: string;
  };
  gateway_providers: {
    organization_id: string;
    id: string;
    name: string;
    rail: string;
    url: string;
    credentials: string | null;
    credential_names: string;
    timeout_ms: number;
    enabled: number;
    created_at: string;
    updated_at: string;
  };
  gateway_payments: {
    organization_id: string;
    capsule_id: string;
    entity_id: string;
    provider_id: string;
    rail: string;
    amount_micros: number;
    request: string;
    idempotency_key: string;
    state: PaymentState;
    attempts: number;
    lease_until: string;
    reference: string | null;
    last_error: string | null;
    created_at: string;
    updated_at: string;
  };
};

export type InvoiceRow = FlowTables['gateway_invoices'];
export type WorkflowRow = FlowTables['gateway_workflows'];
export type ProviderRow = FlowTables['gateway_providers'];
export type PaymentRow = FlowTables['gateway_payments'];

export type InvoiceFormat = 'json' | 'ubl';
export type InvoiceStatus = 'parsed' | 'parse_failed';

/** What an invoice asks for, as parsed; its canonical JSON is what invoice_hash covers. */
export interface InvoiceTerms {
  invoice_number: string;
  issue_date: string | null;
  due_date: string | null;
  /** The payee's details, normalized as beneficiaries are (so the hash compares with a capsule's). */
  payee: Record<string, string>;
  amount: { currency: string; amount: string };
}

export interface InvoiceAnswer {
  id: string;
  invoice_hash: string;
  format: InvoiceFormat;
  status: InvoiceStatus;
  invoice_number: string | null;
  issue_date: string | null;
  due_date: string | null;
  payee: Record<string, string> | null;
  beneficiary_hash: string | null;
  amount: { currency: string; amount: string } | null;
  parse_error: string | null;
  capsule_id: string | null;
  consumed_at: string | null;
  created_at: string;
}

/** A workflow's edge map: the legal next states of each state, and where a consume moves it. */
export interface WorkflowMap {
  initial: string;
  edges: Record<string, string[]>;
  /** The state a bound capsule consumes in, and the one the consume moves the workflow to. */
  consume_from: string;
  consume_to: string;
  /** Where a payment that settled at consume (the `ledger` rail) moves it next; null: stays. */
  settle_to: string | null;
  /** States only a person (user token) may move a workflow into. */
  person_states: string[];
}

export interface WorkflowAnswer {
  entity_id: string;
  workflow_id: string;
  pack_id: string | null;
  state: string;
  next_states: string[];
  capsule_id: string | null;
  map: WorkflowMap;
  history: { from: string | null; to: string; at: string; by: string; reason: string | null }[];
  created_at: string;
  updated_at: string;
}

/**
 * States of the payment a consume hands to a provider (one row per capsule):
 * pending → succeeded | failed | unknown; failed | unknown → pending (a later consume);
 * pending past its lease (the process died) → pending (taken over by a later consume).
 * `failed` means the provider refused the first send of a key for certain (nothing paid): the next
 * attempt gets a new key. A refusal of a key sent before is `unknown` (an earlier send may have
 * paid); an attempt that sent nothing leaves the row as it was before it.
 * `unknown` (timeout, 5xx, 429, no answer) keeps the key, so a retry the provider already executed
 * is answered from its idempotency store and nothing is paid twice.
 */
export type PaymentState = 'pending' | 'succeeded' | 'failed' | 'unknown';

export interface ProviderAnswer {
  id: string;
  name: string;
  rail: string;
  url: string;
  timeout_ms: number;
  enabled: boolean;
  credentials: { configured: boolean; names: string[] };
  created_at: string;
  updated_at: string;
}

/** What a consume answers about the payment it made, under `payment`. */
export interface PaymentAnswer {
  rail: string;
  provider_id: string | null;
  reference: string;
  state: 'succeeded' | 'settled' | 'authorized';
  attempts: number;
}

const make =
  (status: number, type: EnvelopeBError['type'], code: string) =>
  (message: string, param: string | null = null, hint: string | null = null) =>
    new GatewayError(status, { type, code, message, param, hint });

/** The codes of invoices, workflows and providers (catalog groups Invoice, Workflow, Upstream). */
export const flowError = {
  invoiceAlreadyConsumed: make(409, 'conflict', 'invoice_already_consumed'),
  invoiceParseFailed: (message: string, invoiceId: string, invoiceHash: string) =>
    new GatewayError(502, {
      type: 'upstream_error',
      code: 'invoice_parse_failed',
      message,
      param: 'body',
      hint: 'the document is kept in state parse_failed; send a corrected one',
      extra: { invoice_id: invoiceId, invoice_hash: invoiceHash },
    }),
  invoiceNotFound: make(404, 'invalid_request', 'invoice_not_found'),
  invoiceMismatch: make(403, 'authorization_error', 'invoice_terms_mismatch'),
  workflowInvalidTransition: make(409, 'conflict', 'workflow_invalid_transition'),
  workflowNotFound: make(404, 'invalid_request', 'workflow_not_found'),
  workflowAlreadyExists: make(409, 'conflict', 'workflow_already_exists'),
  providerNotFound: make(404, 'invalid_request', 'provider_not_found'),
  providerRailTaken: make(409, 'conflict', 'provider_rail_taken'),
  providerUpstream: (message: string) =>
    new GatewayError(502, {
      type: 'upstream_error',
      code: 'provider_upstream_error',
      message,
      hint: 'the capsule was not consumed; consume again to retry (the same payment key is sent)',
    }),
  providerTimeout: (message: string) =>
    new GatewayError(504, {
      type: 'upstream_error',
      code: 'provider_timeout',
      message,
      hint: 'the capsule was not consumed; consume again to retry (the same payment key is sent)',
    }),
  providerRateLimited: (message: string, retryAfter: string | null) =>
    new GatewayError(429, {
      type: 'upstream_error',
      code: 'provider_rate_limited',
      message,
      hint: retryAfter ? `retry after ${retryAfter}` : 'back off before consuming again',
      ...(retryAfter ? { headers: { 'retry-after': retryAfter } } : {}),
    }),
  paymentInProgress: (message: string, retryAfterSeconds: number) =>
    new GatewayError(409, {
      type: 'conflict',
      code: 'payment_in_progress',
      message,
      hint: `retry after ${retryAfterSeconds} seconds`,
      headers: { 'retry-after': String(retryAfterSeconds) },
    }),
  paymentMismatch: make(409, 'conflict', 'payment_attempt_mismatch'),
  /** A capsule's payment is pending or of unknown outcome: what it needs may not go away. */
  paymentUnresolved: (message: string, param: string | null = null) =>
    new GatewayError(409, {
      type: 'conflict',
      code: 'payment_unresolved',
      message,
      param,
      hint: 'consume the capsule again (the same payment key is sent) until its payment succeeds',
    }),
  credentialsKeyMissing: make(503, 'api_error', 'credentials_key_missing'),
};
