export const CAPSULE_VERSION = 'svc.capsule/1';
/** JWS `typ` header of a capsule. */
export const CAPSULE_TYP = 'svc.capsule+jws';
/** Clock difference tolerated between the minting service and whoever checks expiry. */
export const DEFAULT_SKEW_SECONDS = 30;

/** An amount as a decimal string, never a binary float. */
export interface Money {
  currency: string;
  amount: string;
}

/**
 * What a capsule authorizes: at most `amount_ceiling`, to the payee whose details hash to
 * `beneficiary`, over one of `rail_allowlist`, under the policy pack `pack_id`@`pack_version`
 * (content hash `policy_sha256`), once, before `expires_at`.
 */
export interface CapsulePayload {
  version: typeof CAPSULE_VERSION;
  capsule_id: string;
  /** Base address of the service that minted it. */
  issuer: string;
  organization_id: string;
  /** The paying entity (the economic API's payer). */
  entity_id: string;
  agent_id: string;
  rail_allowlist: string[];
  /** sha256:<hex> of the normalized beneficiary details (see beneficiaryHash). */
  beneficiary: string;
  amount_ceiling: Money;
  pack_id: string;
  pack_version: number;
  policy_sha256: string;
  issued_at: string;
  expires_at: string;
  /** Single use: claimed once per entity. */
  nonce: string;
  invoice_hash?: string;
  workflow_id?: string;
  /** The approval the capsule was minted under. */
  approval_ref?: string;
}

export interface PublicJwk {
  kty: string;
  crv?: string;
  x?: string;
  kid?: string;
  alg?: string;
  use?: string;
}

/** Public keys as a list, or as the key set is published (GET /.well-known/svc-keys.json). */
export type KeySet = readonly PublicJwk[] | { keys: readonly PublicJwk[] };

export type CapsuleErrorCode =
  | 'capsule_payload_invalid'
  | 'capsule_kid_unknown'
  | 'capsule_signature_invalid'
  | 'capsule_expired';

export type CapsuleCheck =
  | { ok: true; payload: CapsulePayload; kid: string }
  | { ok: false; code: CapsuleErrorCode; message: string; param: string | null };

/** Decimal places each currency allows (invalid_amount_precision beyond them). */
export const CURRENCY_DECIMALS: Readonly<Record<string, number>> = { USD: 2, EUR: 2, GBP: 2, USDC: 6 };
