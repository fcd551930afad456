import { createHash, hash } from 'node:crypto';
import { isTaggedHash, tagDigest, untagDigest } from './canonical.js';

// RFC 6962 section 2.1: distinct prefixes for leaves and inner nodes, so a leaf can never be passed
// off as an inner node (second-preimage attack on the tree).
const LEAF_PREFIX = Buffer.from([0x00]);
const NODE_PREFIX = Buffer.from([0x01]);

/** SHA-256(0x00 || data); strings are hashed as UTF-8. */
export function leafHash(data: Uint8Array | string): Buffer {
  // One-shot hashing: no Hash object per call, which matters at one root per receipt. U+0000 is the
  // single byte 0x00 in UTF-8, so a string leaf is hashed without copying it into a buffer first.
  if (typeof data === 'string') return hash('sha256', `\u0000${data}`, 'buffer');
  const buf = Buffer.allocUnsafe(data.length + 1);
  buf[0] = LEAF_PREFIX[0]!;
  buf.set(data, 1);
  return hash('sha256', buf, 'buffer');
}

// Inner nodes of SHA-256 children are always 65 bytes: one scratch buffer serves them all (hash()
// is synchronous and keeps nothing of its input).
const NODE_SCRATCH = Buffer.alloc(65);
NODE_SCRATCH[0] = 0x01;

/** SHA-256(0x01 || left || right). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  if (left.length === 32 && right.length === 32) {
    NODE_SCRATCH.set(left, 1);
    NODE_SCRATCH.set(right, 33);
    return hash('sha256', NODE_SCRATCH, 'buffer');
  }
  const buf = Buffer.allocUnsafe(1 + left.length + right.length);
  buf[0] = NODE_PREFIX[0]!;
  buf.set(left, 1);
  buf.set(right, 1 + left.length);
  return hash('sha256', buf, 'buffer');
}

/** SHA-256 of nothing: RFC 6962's hash of the empty tree (e3b0c442...). */
export const EMPTY_TREE_HASH: Buffer = createHash('sha256').digest();

/**
 * Reference Merkle Tree Hash of RFC 6962 section 2.1, straight from the definition. `leaves` are
 * the leaf *data* entries d(0)..d(n-1), not leaf hashes. O(n) with O(log n) recursion; meant for
 * tests and cross-checks, use MerkleFrontier for anything incremental.
 */
export function merkleTreeHash(leaves: readonly Uint8Array[]): Buffer {
  return mth(leaves, 0, leaves.length);
}

function mth(leaves: readonly Uint8Array[], from: number, to: number): Buffer {
  const n = to - from;
  if (n === 0) return Buffer.from(EMPTY_TREE_HASH);
  if (n === 1) return leafHash(leaves[from]!);
  const k = largestPowerOfTwoBelow(n);
  return nodeHash(mth(leaves, from, from + k), mth(leaves, from + k, to));
}

/** Largest power of two strictly smaller than n (n >= 2). */
function largestPowerOfTwoBelow(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** Number of set bits; arithmetic rather than bit ops so sizes above 2^31 work. */
function popcount(n: number): number {
  let bits = 0;
  for (let v = n; v > 0; v = Math.floor(v / 2)) bits += v % 2;
  return bits;
}

/**
 * Compact range of an append-only RFC 6962 tree: the roots of its perfect subtrees, largest first,
 * one per set bit of `size`. That is all that is needed to append a leaf and to compute the root,
 * both in O(log n), so the chain head never has to hold the whole tree.
 */
export class MerkleFrontier {
  private readonly nodes: Buffer[];
  private count: number;

  constructor(nodes: Buffer[] = [], size = 0) {
    if (!Number.isSafeInteger(size) || size < 0) throw new Error(`invalid Merkle tree size ${size}`);
    if (nodes.length !== popcount(size)) {
      throw new Error(
        `Merkle frontier of a ${size}-leaf tree needs ${popcount(size)} nodes, got ${nodes.length}`,
      );
    }
    this.nodes = nodes.map((n) => Buffer.from(n));
    this.count = size;
  }

  /** Rebuilds a frontier from its persisted form (ChainHead.frontier + sequence). */
  static fromTagged(frontier: readonly string[], size: number): MerkleFrontier {
    for (const h of frontier) {
      if (!isTaggedHash(h)) throw new Error(`invalid Merkle frontier entry ${JSON.stringify(h)}`);
    }
    return new MerkleFrontier(frontier.map(untagDigest), size);
  }

  /** Number of leaves appended so far. */
  get size(): number {
    return this.count;
  }

  /** Appends one leaf, given as its leafHash(). */
  append(leaf: Uint8Array): void {
    if (leaf.byteLength !== 32) throw new Error('Merkle leaf must be a 32-byte SHA-256 leaf hash');
    let node: Buffer = Buffer.from(leaf);
    // Each trailing 1 bit of the old size is a perfect subtree of the new leaf's size: merge them.
    for (let s = this.count; s % 2 === 1; s = (s - 1) / 2) {
      node = nodeHash(this.nodes.pop()!, node);
    }
    this.nodes.push(node);
    this.count++;
  }

  /**
   * Merkle Tree Hash of all leaves so far. For an empty tree this is SHA-256 of the empty string,
   * as RFC 6962 defines it, rather than an error.
   */
  root(): Buffer {
    // RFC 6962 splits at the largest power of two below n, which is exactly the leftmost perfect
    // subtree; so the root is the right-to-left fold of the frontier.
    let acc: Buffer | undefined = this.nodes.at(-1);
    if (acc === undefined) return Buffer.from(EMPTY_TREE_HASH);
    for (let i = this.nodes.length - 2; i >= 0; i--) acc = nodeHash(this.nodes[i]!, acc);
    return acc;
  }

  /** Persistable form: `sha256:<hex>` per node, largest subtree first. */
  toTagged(): string[] {
    return this.nodes.map(tagDigest);
  }

  clone(): MerkleFrontier {
    return new MerkleFrontier(this.nodes, this.count);
  }
}
