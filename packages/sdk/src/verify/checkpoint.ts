import { type KeySet, signingKey, verifyEd25519 } from '@svc/capsules';
import { RECEIPT_SCHEMA, receiptHash, receiptLeafData } from './chain.js';
import { canonicalJson, isTaggedHash, tag, untag } from './hash.js';
import { leafHash, verifyConsistency, verifyInclusion } from './merkle.js';
import type { Checkpoint, CheckResult, ConsistencyProof, FailureCode, InclusionProof } from './model.js';

export const CHECKPOINT_SCHEMA = 'svc.checkpoint/1';

export type { KeySet };

const fail = (code: FailureCode, reason: string): CheckResult => ({ ok: false, code, reason });

function fromBase64Url(s: string): Uint8Array {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new Error('the signature is not base64url');
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4);
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The members of a checkpoint, before its signature is looked at. */
function checkpointProblem(c: Checkpoint): CheckResult | null {
  if (c === null || typeof c !== 'object') return fail('malformed_checkpoint', 'not a checkpoint object');
  if (c.schema !== CHECKPOINT_SCHEMA) {
    return fail('malformed_checkpoint', `unknown checkpoint schema ${JSON.stringify(c.schema)}`);
  }
  if (!Number.isSafeInteger(c.tree_size) || c.tree_size < 1) {
    return fail('malformed_checkpoint', 'tree_size is not a positive integer');
  }
  if (!isTaggedHash(c.root_hash) || !isTaggedHash(c.last_receipt_hash)) {
    return fail('malformed_checkpoint', 'root_hash or last_receipt_hash is not sha256:<64 hex>');
  }
  if (typeof c.organization_id !== 'string' || typeof c.kid !== 'string') {
    return fail('malformed_checkpoint', 'organization_id or kid is missing');
  }
  if (typeof c.signature !== 'string') return fail('malformed_checkpoint', 'signature is missing');
  return null;
}

/**
 * A checkpoint's Ed25519 signature against a key set you trust (GET /.well-known/svc-keys.json,
 * fetched and kept independently of the chain): the signed bytes are the canonical JSON of the
 * checkpoint without `signature`, `kid` included. A key that is not in the set (unknown, or
 * withdrawn after its overlap) is refused (`unknown_key`), so is a kid the set publishes more than
 * once and a key that is not an Ed25519 signing key (`unusable_key`). WebCrypto Ed25519.
 */
export async function verifyCheckpointSignature(checkpoint: Checkpoint, keys: KeySet): Promise<CheckResult> {
  const malformed = checkpointProblem(checkpoint);
  if (malformed) return malformed;
  // The same rule as capsules (@svc/capsules signingKey): exactly one entry with the kid, an
  // Ed25519 key for signatures.
  const key = signingKey(keys, checkpoint.kid);
  if (!key.ok) {
    return key.problem === 'unknown'
      ? fail('unknown_key', `signed with key ${checkpoint.kid}, which the key set does not publish`)
      : fail('unusable_key', key.message);
  }
  const { signature, ...signed } = checkpoint;
  try {
    const ok = await verifyEd25519(
      key.jwk.x,
      fromBase64Url(signature),
      new TextEncoder().encode(canonicalJson(signed)),
    );
    return ok ? { ok: true } : fail('bad_signature', 'the signature does not match the checkpoint');
  } catch (err) {
    return fail('bad_signature', `the checkpoint cannot be verified: ${(err as Error).message}`);
  }
}

/**
 * One receipt without the whole chain: its own hash, then its inclusion proof
 * (GET /v1/receipts/proofs/inclusion) against the root of a checkpoint whose signature verifies.
 */
export async function verifyReceiptInclusion(
  receipt: Record<string, unknown>,
  proof: InclusionProof,
  checkpoint: Checkpoint,
  keys: KeySet,
): Promise<CheckResult> {
  const signature = await verifyCheckpointSignature(checkpoint, keys);
  if (!signature.ok) return fail(signature.code, `checkpoint: ${signature.reason}`);
  if (receipt === null || typeof receipt !== 'object') return fail('malformed_receipt', 'not a receipt');
  // Hashed by the rules of this schema only: another one is reported as such, not as a hash mismatch.
  if (receipt.schema !== RECEIPT_SCHEMA) {
    return fail('malformed_receipt', `schema is ${JSON.stringify(receipt.schema)}, not ${RECEIPT_SCHEMA}`);
  }
  if (receipt.organization_id !== checkpoint.organization_id) {
    return fail('organization_mismatch', 'the receipt and the checkpoint are of different organizations');
  }
  let computed: string;
  try {
    computed = await receiptHash(receipt);
  } catch (err) {
    return fail('malformed_receipt', `the receipt cannot be canonicalized: ${(err as Error).message}`);
  }
  if (computed !== receipt.receipt_hash) {
    return fail('receipt_hash_mismatch', 'receipt_hash does not match the receipt content');
  }
  if (proof === null || typeof proof !== 'object' || !Array.isArray(proof.audit_path)) {
    return fail('malformed_proof', 'the proof has no audit_path');
  }
  if (proof.sequence !== receipt.sequence) return fail('proof_mismatch', 'the proof is for another sequence');
  if (proof.tree_size !== checkpoint.tree_size) {
    return fail('proof_mismatch', 'the proof is for another tree size');
  }
  const leaf = await leafHash(receiptLeafData(receipt));
  if (proof.leaf_hash !== undefined && proof.leaf_hash !== tag(leaf)) {
    return fail('leaf_mismatch', 'leaf_hash is not the hash of this receipt');
  }
  if (!proof.audit_path.every(isTaggedHash)) {
    return fail('malformed_proof', 'audit_path holds a malformed hash');
  }
  const included = await verifyInclusion(
    leaf,
    proof.sequence,
    proof.tree_size,
    proof.audit_path.map(untag),
    untag(checkpoint.root_hash),
  );
  if (!included) return fail('not_included', 'the audit path does not lead to the checkpoint root');
  // The leaf leaves out merkle_root and receipt_hash, so the path does not vouch for them. The
  // checkpoint does for its last receipt: its root is that receipt's merkle_root, and it names the
  // receipt's hash. (Of an earlier receipt, a consistency proof to its own tree size would.)
  if (
    receipt.sequence === checkpoint.tree_size - 1 &&
    (receipt.merkle_root !== checkpoint.root_hash || receipt.receipt_hash !== checkpoint.last_receipt_hash)
  ) {
    return fail(
      'root_mismatch',
      "the checkpoint's last receipt must carry its root_hash and last_receipt_hash; this one does not",
    );
  }
  return { ok: true };
}

/**
 * Two checkpoints of one log without the chain between them: both signatures verify, they are of
 * the same organization and origin, and the consistency proof (GET /v1/receipts/proofs/consistency,
 * RFC 9162 2.1.4) shows the newer tree extends the older one, i.e. nothing the older one signed was
 * changed or removed since. Checkpoints of the same size must be identical in root and last receipt.
 */
export async function verifyCheckpointConsistency(
  older: Checkpoint,
  newer: Checkpoint,
  proof: ConsistencyProof | readonly string[],
  keys: KeySet,
): Promise<CheckResult> {
  for (const [name, c] of [
    ['older', older],
    ['newer', newer],
  ] as const) {
    const sig = await verifyCheckpointSignature(c, keys);
    if (!sig.ok) return fail(sig.code, `${name} checkpoint: ${sig.reason}`);
  }
  if (older.organization_id !== newer.organization_id) {
    return fail('organization_mismatch', 'the checkpoints are of different organizations');
  }
  if (older.origin !== newer.origin) return fail('origin_mismatch', 'the checkpoints are of different logs');
  if (older.tree_size > newer.tree_size) {
    return fail(
      'size_order',
      `the older checkpoint (${older.tree_size}) is larger than the newer (${newer.tree_size})`,
    );
  }
  const hashes = Array.isArray(proof) ? proof : (proof as ConsistencyProof)?.proof;
  if (!Array.isArray(hashes) || !hashes.every(isTaggedHash)) {
    return fail('malformed_proof', 'the consistency proof is not a list of sha256:<64 hex>');
  }
  if (!Array.isArray(proof)) {
    const p = proof as ConsistencyProof;
    if (p.first !== older.tree_size || p.second !== newer.tree_size) {
      return fail(
        'proof_mismatch',
        `the proof is for sizes ${p.first} to ${p.second}, not ${older.tree_size} to ${newer.tree_size}`,
      );
    }
  }
  if (older.tree_size === newer.tree_size) {
    if (older.root_hash !== newer.root_hash || older.last_receipt_hash !== newer.last_receipt_hash) {
      return fail('fork', `two different trees were signed at size ${older.tree_size}`);
    }
    // RFC 9162 2.1.4.2: between trees of one size the proof is empty.
    return hashes.length === 0
      ? { ok: true }
      : fail('proof_mismatch', `a proof between two trees of size ${older.tree_size} is empty`);
  }
  const consistent = await verifyConsistency(
    older.tree_size,
    newer.tree_size,
    untag(older.root_hash),
    untag(newer.root_hash),
    hashes.map(untag),
  );
  return consistent
    ? { ok: true }
    : fail(
        'inconsistent',
        `the tree of ${newer.tree_size} does not extend the tree of ${older.tree_size}: the history was changed between them`,
      );
}
