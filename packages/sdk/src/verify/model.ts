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
  /** For each requested tree size the chain covered: the recomputed root and that receipt's hash. */
  heads: Map<number, { root: string; lastHash: string }>;
  /** organization_id of the first receipt read, null when none was. */
  organizationId: string | null;
}

export interface VerifyOptions {
  /** Chain head just before the first receipt, for exports that start mid-chain. */
  start?: ChainStart;
  /** Tree sizes (of checkpoints) whose root and last receipt hash to recompute into `heads`. */
  treeSizes?: Iterable<number>;
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

/** GET /v1/receipts/proofs/consistency. */
export interface ConsistencyProof {
  first: number;
  second: number;
  proof: string[];
}

/** Why a check failed, for programs; `reason` says it for people. */
export type FailureCode =
  | 'malformed_checkpoint'
  | 'unknown_key'
  | 'unusable_key'
  | 'bad_signature'
  | 'organization_mismatch'
  | 'origin_mismatch'
  | 'malformed_receipt'
  | 'receipt_hash_mismatch'
  | 'proof_mismatch'
  | 'malformed_proof'
  | 'leaf_mismatch'
  | 'not_included'
  | 'size_order'
  | 'fork'
  | 'inconsistent'
  | 'root_mismatch'
  | 'last_receipt_mismatch';

export type CheckResult = { ok: true } | { ok: false; code: FailureCode; reason: string };

/** One checkpoint checked against a key set and an exported chain (checkCheckpoints). */
export interface CheckpointResult {
  tree_size: number;
  kid: string;
  timestamp: string;
  /**
   * `ok`: signed by the key set and matches the chain; `unchecked`: the chain does not cover it
   * (`not_covered`), or its key is not in the set and a checkpoint that verifies covers as much
   * (`unknown_key`).
   */
  status: 'ok' | 'failed' | 'unchecked';
  code?: FailureCode | 'not_covered';
  problem?: string;
}

/** verifyExport: the chain and every checkpoint against it. */
export interface ExportReport {
  ok: boolean;
  chain: VerifyReport;
  checkpoints: CheckpointResult[];
}
