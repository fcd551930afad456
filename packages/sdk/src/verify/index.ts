/**
 * Offline evidence checks that run in any runtime (WebCrypto only): exported receipt chains, and
 * RFC 9162 inclusion proofs, the primitive that checking a receipt against a signed checkpoint
 * (tree size + root, signed with a published key) builds on.
 */
export { MAX_ERRORS, RECEIPT_SCHEMA, receiptHash, receiptLeafData, verifyReceiptChain } from './chain.js';
export { canonicalJson, GENESIS_HASH, hashJson, isTaggedHash, sha256, tag, untag } from './hash.js';
export { leafHash, MerkleFrontier, nodeHash, verifyInclusion } from './merkle.js';
export type { ChainStart, VerifyError, VerifyReport } from './model.js';
