/**
 * Offline evidence checks that run in any runtime (WebCrypto only), as docs/receipts.md describes:
 * exported receipt chains, checkpoint signatures against the published key set, and a receipt's
 * inclusion (RFC 9162) in a signed checkpoint.
 */
export { MAX_ERRORS, RECEIPT_SCHEMA, receiptHash, receiptLeafData, verifyReceiptChain } from './chain.js';
export { CHECKPOINT_SCHEMA, verifyCheckpointSignature, verifyReceiptInclusion } from './checkpoint.js';
export { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, sha256, tag, untag } from './hash.js';
export { leafHash, MerkleFrontier, nodeHash, verifyInclusion } from './merkle.js';
export type {
  ChainStart,
  Checkpoint,
  CheckResult,
  InclusionProof,
  PublicJwk,
  VerifyError,
  VerifyReport,
} from './model.js';
