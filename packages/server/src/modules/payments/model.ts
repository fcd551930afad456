import type { EnvelopeBError } from '../../lib/envelope-b.js';
import type { IdempotencyRow } from '../../lib/idempotency-store.js';

/** Rows of the gateway's tables (migration 0015). */
export type GatewayTables = {
  gateway_packs: {
    organization_id: string;
    pack_id: string;
    version: number;
    content: string;
    sha256: string;
    created_at: string;
  };
  gateway_payees: {
    organization_id: string;
    id: string;
    beneficiary_hash: string;
    details: string;
    held: number;
    quarantine_lifted_at: string | null;
    quarantine_lifted_by: string | null;
    created_at: string;
    updated_at: string;
  };
  gateway_capsules: {
    organization_id: string;
    id: string;
    project_id: string | null;
    entity_id: string;
    agent_id: string;
    payee_id: string;
    nonce: string;
    payload: string;
    capsule: string;
    status: CapsuleStatus;
    expires_at: string;
    consumption: string | null;
    receipt_id: string | null;
    /** While a consumed capsule's receipt is being written: when its writer claimed it (migration 0017). */
    receipt_claimed_at: string | null;
    created_at: string;
    updated_at: string;
  };
  gateway_nonces: {
    organization_id: string;
    entity_id: string;
    nonce: string;
    capsule_id: string;
    claimed_at: string;
  };
  gateway_idempotency: IdempotencyRow;
};

export type CapsuleStatus = 'active' | 'consumed' | 'revoked';

/** A named CEL condition: consume proceeds only when every one evaluates to true. */
export interface PackCondition {
  name: string;
  expression: string;
}

/** The content of one policy pack version (what its sha256 covers). USD amounts are decimal strings. */
export interface PackContent {
  entity_caps: { usd_24h: string | null; usd_7d: string | null; usd_30d: string | null };
  approval_threshold_usd: string | null;
  dual_control_threshold_usd: string | null;
  allowed_rails: string[];
  invoice_required: boolean;
  quarantine_seconds: number;
  max_ttl_seconds: number;
  conditions: PackCondition[];
  /** The pack's own workflow edge map; absent: the default map. */
  workflow?: import('./flow-model.js').WorkflowMap;
}

export interface PackAnswer extends PackContent {
  pack_id: string;
  version: number;
  sha256: string;
  created_at: string;
}

export interface PayeeAnswer {
  id: string;
  beneficiary_hash: string;
  details: Record<string, string>;
  held: boolean;
  quarantine: { lifted_at: string | null; lifted_by: string | null };
  created_at: string;
  updated_at: string;
}

export interface Consumption {
  amount: string;
  currency: string;
  rail: string;
  invoice_hash: string | null;
  consumed_at: string;
  ledger_entry_id: string;
  /** How the payment was made (rail, provider, reference); absent on consumptions made before routing. */
  payment?: import('./flow-model.js').PaymentAnswer;
}

export interface CapsuleAnswer {
  id: string;
  capsule: string;
  status: CapsuleStatus;
  payee_id: string;
  payload: Record<string, unknown>;
  consumption: Consumption | null;
  receipt_id: string | null;
  created_at: string;
  updated_at: string;
}

/** A catalog error of envelope B with its HTTP status. */
export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly body: EnvelopeBError,
  ) {
    super(body.message);
    this.name = 'GatewayError';
  }
}

const make =
  (status: number, type: EnvelopeBError['type'], code: string) =>
  (message: string, param: string | null = null, hint: string | null = null) =>
    new GatewayError(status, { type, code, message, param, hint });

/** Every code this module answers, with its status and type (the catalog's). */
export const gatewayError = {
  invalidRequest: make(400, 'invalid_request', 'invalid_request'),
  payloadInvalid: make(400, 'invalid_request', 'capsule_payload_invalid'),
  precision: make(400, 'invalid_request', 'invalid_amount_precision'),
  idempotencyReused: make(400, 'invalid_request', 'idempotency_key_reused_with_different_payload'),
  idempotencyInProgress: make(409, 'conflict', 'idempotency_request_in_progress'),
  expired: make(403, 'authorization_error', 'capsule_expired'),
  signature: make(403, 'authorization_error', 'capsule_signature_invalid'),
  kidUnknown: make(403, 'authorization_error', 'capsule_kid_unknown'),
  replayed: make(409, 'conflict', 'capsule_replayed'),
  consumed: make(409, 'conflict', 'capsule_consumed'),
  revoked: make(409, 'conflict', 'capsule_revoked'),
  capsuleNotFound: make(404, 'invalid_request', 'capsule_not_found'),
  payeeNotFound: make(404, 'invalid_request', 'beneficiary_not_found'),
  hashMismatch: make(403, 'authorization_error', 'beneficiary_hash_mismatch'),
  held: make(403, 'authorization_error', 'beneficiary_held'),
  quarantine: make(403, 'authorization_error', 'beneficiary_quarantine_active'),
  overCeiling: make(403, 'authorization_error', 'amount_exceeds_capsule_ceiling'),
  overEntityCap: make(403, 'authorization_error', 'amount_exceeds_entity_cap'),
  rail: make(403, 'authorization_error', 'rail_not_in_allowlist'),
  conditionFailed: make(403, 'authorization_error', 'policy_condition_failed'),
  evalError: make(500, 'api_error', 'policy_eval_error'),
  packNotFound: make(404, 'invalid_request', 'policy_pack_not_found'),
  packHashMismatch: make(409, 'conflict', 'policy_pack_hash_mismatch'),
  notImplemented: make(501, 'api_error', 'not_implemented'),
  invoiceMissing: make(400, 'invalid_request', 'invoice_hash_missing'),
  approvalRequired: (approvalId: string, payloadHash: string, message: string) =>
    new GatewayError(409, {
      type: 'conflict',
      code: 'approval_required',
      message,
      hint: `poll GET /v1/approvals/${approvalId} and mint again with approval_ref once it is approved`,
      extra: { approval_id: approvalId, payload_hash: payloadHash },
    }),
  dualControlRequired: (approvalId: string, payloadHash: string, message: string) =>
    new GatewayError(409, {
      type: 'conflict',
      code: 'dual_control_required',
      message,
      hint: `two people other than the requester must approve it (POST /v1/approvals/${approvalId}/resolve); then mint again with approval_ref`,
      extra: { approval_id: approvalId, payload_hash: payloadHash },
    }),
  approvalPayloadMismatch: (payloadHash: string, message: string) =>
    new GatewayError(409, {
      type: 'conflict',
      code: 'approval_payload_mismatch',
      message,
      param: 'approval_ref',
      extra: { payload_hash: payloadHash },
    }),
  approvalDenied: make(403, 'authorization_error', 'approval_denied'),
  approvalExpired: make(409, 'conflict', 'approval_expired'),
  approvalConsumed: make(409, 'conflict', 'approval_already_consumed'),
  approvalResolved: make(409, 'conflict', 'approval_already_resolved'),
  approvalNotFound: make(404, 'invalid_request', 'approval_not_found'),
  approvalsUnavailable: make(403, 'authorization_error', 'approvals_unavailable'),
  forbidden: make(403, 'authorization_error', 'authorization_error'),
  unavailable: make(503, 'api_error', 'service_unavailable'),
};
