import { receiptHash, receiptLeafData } from './chain.js';
import { canonicalJson, isTaggedHash, tag, untag } from './hash.js';
import { leafHash, verifyInclusion } from './merkle.js';
import type { Checkpoint, CheckResult, InclusionProof, PublicJwk } from './model.js';

export const CHECKPOINT_SCHEMA = 'svc.checkpoint/1';

function fromBase64Url(s: string): Uint8Array {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4);
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * A checkpoint's Ed25519 signature against a key set you trust (GET /.well-known/svc-keys.json,
 * fetched and kept independently of the chain): the signed bytes are the canonical JSON of the
 * checkpoint without `signature`, `kid` included. WebCrypto Ed25519.
 */
export async function verifyCheckpointSignature(
  checkpoint: Checkpoint,
  keys: readonly PublicJwk[] | { keys: readonly PublicJwk[] },
): Promise<CheckResult> {
  const set = Array.isArray(keys) ? keys : (keys as { keys: readonly PublicJwk[] }).keys;
  if (checkpoint?.schema !== CHECKPOINT_SCHEMA)
    return { ok: false, reason: `schema is not ${CHECKPOINT_SCHEMA}` };
  if (!Number.isSafeInteger(checkpoint.tree_size) || checkpoint.tree_size < 1) {
    return { ok: false, reason: 'tree_size is not a positive integer' };
  }
  if (!isTaggedHash(checkpoint.root_hash) || !isTaggedHash(checkpoint.last_receipt_hash)) {
    return { ok: false, reason: 'root_hash or last_receipt_hash is not sha256:<64 hex>' };
  }
  const jwk = set.find((k) => k.kid === checkpoint.kid);
  if (!jwk) return { ok: false, reason: `key ${checkpoint.kid} is not in the key set` };
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string') {
    return { ok: false, reason: `key ${checkpoint.kid} is not an Ed25519 public key` };
  }
  const { signature, ...signed } = checkpoint;
  if (typeof signature !== 'string') return { ok: false, reason: 'signature is missing' };
  try {
    const key = await crypto.subtle.importKey(
      'jwk',
      { kty: 'OKP', crv: 'Ed25519', x: jwk.x },
      { name: 'Ed25519' },
      false,
      ['verify'],
    );
    const ok = await crypto.subtle.verify(
      { name: 'Ed25519' },
      key,
      fromBase64Url(signature) as Uint8Array<ArrayBuffer>,
      new TextEncoder().encode(canonicalJson(signed)),
    );
    return ok ? { ok: true } : { ok: false, reason: 'the signature does not verify with the key of kid' };
  } catch (err) {
    return { ok: false, reason: `the signature cannot be checked: ${(err as Error).message}` };
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
  keys: readonly PublicJwk[] | { keys: readonly PublicJwk[] },
): Promise<CheckResult> {
  const signature = await verifyCheckpointSignature(checkpoint, keys);
  if (!signature.ok) return { ok: false, reason: `checkpoint: ${signature.reason}` };
  if (receipt.organization_id !== checkpoint.organization_id) {
    return { ok: false, reason: 'the receipt and the checkpoint are of different organizations' };
  }
  let computed: string;
  try {
    computed = await receiptHash(receipt);
  } catch (err) {
    return { ok: false, reason: `the receipt cannot be canonicalized: ${(err as Error).message}` };
  }
  if (computed !== receipt.receipt_hash)
    return { ok: false, reason: 'receipt_hash does not match the receipt content' };
  if (proof.sequence !== receipt.sequence) return { ok: false, reason: 'the proof is for another sequence' };
  if (proof.tree_size !== checkpoint.tree_size)
    return { ok: false, reason: 'the proof is for another tree size' };
  const leaf = await leafHash(receiptLeafData(receipt));
  if (proof.leaf_hash !== undefined && proof.leaf_hash !== tag(leaf)) {
    return { ok: false, reason: 'leaf_hash is not the hash of this receipt' };
  }
  if (!proof.audit_path.every(isTaggedHash))
    return { ok: false, reason: 'audit_path holds a malformed hash' };
  const included = await verifyInclusion(
    leaf,
    proof.sequence,
    proof.tree_size,
    proof.audit_path.map(untag),
    untag(checkpoint.root_hash),
  );
  return included
    ? { ok: true }
    : { ok: false, reason: 'the audit path does not lead to the checkpoint root' };
}
