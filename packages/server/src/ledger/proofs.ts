import { EMPTY_TREE_HASH, nodeHash } from './merkle.js';

/**
 * RFC 9162 section 2.1 Merkle proofs over an append-only tree whose leaves are given as their leaf
 * hashes (SHA-256(0x00 || data)). Sizes and indexes are plain numbers handled arithmetically, so
 * trees beyond 2^31 leaves work.
 */

/** Largest power of two strictly smaller than n (n >= 2). */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** MTH over leaf hashes[from, to). */
export function subtreeHash(leaves: readonly Uint8Array[], from = 0, to = leaves.length): Buffer {
  const n = to - from;
  if (n === 0) return Buffer.from(EMPTY_TREE_HASH);
  if (n === 1) return Buffer.from(leaves[from]!);
  const k = split(n);
  return nodeHash(subtreeHash(leaves, from, from + k), subtreeHash(leaves, from + k, to));
}

/** MTH of the leaves [from, to); async so that a store can serve (and cache) subtrees of a large tree. */
export type RangeHasher = (from: number, to: number) => Promise<Buffer>;

/** A RangeHasher over leaf hashes held in memory. */
export const arrayHasher =
  (leaves: readonly Uint8Array[]): RangeHasher =>
  async (from, to) =>
    subtreeHash(leaves, from, to);

/** PATH(m, D[0:n]): the audit path of leaf m in the tree of the first n leaves, bottom up. */
export async function inclusionProof(hashRange: RangeHasher, m: number, n: number): Promise<Buffer[]> {
  if (!(Number.isSafeInteger(m) && m >= 0 && m < n))
    throw new RangeError(`leaf ${m} is not in a tree of size ${n}`);
  const path: Buffer[] = [];
  const walk = async (index: number, from: number, to: number): Promise<void> => {
    if (to - from <= 1) return;
    const k = split(to - from);
    if (index < k) {
      await walk(index, from, from + k);
      path.push(await hashRange(from + k, to));
    } else {
      await walk(index - k, from + k, to);
      path.push(await hashRange(from, from + k));
    }
  };
  await walk(m, 0, n);
  return path;
}

/** PROOF(m, D[0:n]): proves that the tree of the first m leaves is a prefix of the tree of n. */
export async function consistencyProof(hashRange: RangeHasher, m: number, n: number): Promise<Buffer[]> {
  if (!(Number.isSafeInteger(m) && m > 0 && m <= n))
    throw new RangeError(`no consistency proof from ${m} to ${n}`);
  const proof: Buffer[] = [];
  const sub = async (size: number, from: number, to: number, complete: boolean): Promise<void> => {
    const count = to - from;
    if (size === count) {
      if (!complete) proof.push(await hashRange(from, to));
      return;
    }
    const k = split(count);
    if (size <= k) {
      await sub(size, from, from + k, complete);
      proof.push(await hashRange(from + k, to));
    } else {
      await sub(size - k, from + k, to, false);
      proof.push(await hashRange(from, from + k));
    }
  };
  await sub(m, 0, n, true);
  return proof;
}

/** Splits [from, to) the way RFC 9162 does: the largest power of two below its size goes left. */
export function splitRange(from: number, to: number): number {
  return from + split(to - from);
}
