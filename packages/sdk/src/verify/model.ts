export interface VerifyError {
  /** 1-based position in the input (NDJSON line, blank lines included). */
  line: number;
  sequence: number | null;
  receipt_id: string | null;
  problem: string;
  /** For hash mismatches: what the verifier computed / what the receipt says. */
  expected?: string;
  actual?: string;
}

export interface VerifyReport {
  ok: boolean;
  /** Receipts examined. */
  count: number;
  /** receipt_hash of the last receipt read, null if none. */
  lastHash: string | null;
  /** Recomputed Merkle root after the last receipt, null when roots could not be checked. */
  merkleRoot: string | null;
  /** The first 20 problems in input order; errors[0] is the first break. */
  errors: VerifyError[];
  warnings: string[];
}

/** The chain head just before the first receipt of an export that starts mid-chain. */
export interface ChainStart {
  /** Sequence of the first receipt (= receipts before it). */
  sequence: number;
  /** receipt_hash of the receipt before it. */
  lastHash: string;
  /** Merkle frontier after the receipts before it (`sha256:<hex>` per perfect subtree, largest first). */
  frontier: string[];
}

/** A signed tree head of one organization's chain (`svc.checkpoint/1`, docs/receipts.md). */
export interface Checkpoint {
  schema: string;
  origin: string;
  organization_id: string;
  tree_size: number;
  root_hash: string;
  last_receipt_hash: string;
  timestamp: string;
  kid: string;
  signature: string;
}

/** One key of the published key set (JWKS). */
export interface PublicJwk {
  kty: string;
  crv?: string;
  x?: string;
  kid?: string;
  alg?: string;
  use?: string;
}

/** GET /v1/receipts/proofs/inclusion. */
export interface InclusionProof {
  sequence: number;
  tree_size: number;
  leaf_hash?: string;
  audit_path: string[];
}

export type CheckResult = { ok: true } | { ok: false; reason: string };
