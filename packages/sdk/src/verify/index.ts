/**
 * Offline evidence checks that run in any runtime (WebCrypto only), as docs/receipts.md describes:
 * exported receipt chains, checkpoint signatures against the published key set, a receipt's
 * inclusion in a signed checkpoint, two checkpoints' consistency (RFC 9162) and a whole export
 * against every checkpoint of it. `svc receipts verify` is built on these.
 */
export { MAX_ERRORS, RECEIPT_SCHEMA, receiptHash, receiptLeafData, verifyReceiptChain } from './chain.js';
export {
  CHECKPOINT_SCHEMA,
  type KeySet,
  verifyCheckpointConsistency,
  verifyCheckpointSignature,
  verifyReceiptInclusion,
} from './checkpoint.js';
export { checkCheckpoints, formatCheckpointResults, formatReport, verifyExport } from './export.js';
export { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, sha256, tag, untag } from './hash.js';
export { linesOf } from './lines.js';
export { leafHash, MerkleFrontier, nodeHash, verifyConsistency, verifyInclusion } from './merkle.js';
export type {
  ChainStart,
  Checkpoint,
  CheckpointResult,
  CheckResult,
  ConsistencyProof,
  ExportReport,
  FailureCode,
  InclusionProof,
  PublicJwk,
  VerifyError,
  VerifyOptions,
  VerifyReport,
} from './model.js';
