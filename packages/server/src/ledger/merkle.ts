import { createHash, hash } from 'node:crypto';
import { isTaggedHash, tagDigest } from './canonical.js';

// RFC 6962 section 2.1: distinct prefixes for leaves and inner nodes, so a leaf can never be passed
// off as an inner node (second-preimage attack on the tree).
const LEAF_PREFIX = Buffer.from([0x00]);
const NODE_PREFIX = Buffer.from([0x01]);

// node:crypto's one-shot hash() is about 3.5x slower when asked for a Buffer than for a string
// (1.9 against 0.55 µs for an inner node here), so digests that feed further hashing travel as
// 32-character latin1 strings: each character is one byte of the digest, losslessly. ('binary' is
// Node's other name for latin1, the one hash()'s types accept.)

/** SHA-256(0x00 || data) as a latin1 string; strings are hashed as UTF-8. */
function leafDigest(data: Uint8Array | string): string {
  // U+0000 is the single byte 0x00 in UTF-8, so a string leaf is hashed without copying it into a
  // buffer first.
  if (typeof data === 'string') return hash('sha256', `\u0000${data}`, 'binary');
  const buf = Buffer.allocUnsafe(data.length + 1);
  buf[0] = LEAF_PREFIX[0]!;
  buf.set(data, 1);
  return hash('sha256', buf, 'binary');
}

// Inner nodes of SHA-256 children are always 65 bytes: one scratch buffer serves them all (hash()
// is synchronous and keeps nothing of its input).
const NODE_SCRATCH = Buffer.alloc(65);
NODE_SCRATCH[0] = 0x01;

/** SHA-256(0x01 || left || right) of two latin1 digests, in the given encoding. */
function nodeDigest(left: string, right: string, encoding: 'binary' | 'hex'): string {
  NODE_SCRATCH.write(left, 1, 32, 'latin1');
  NODE_SCRATCH.write(right, 33, 32, 'latin1');
  return hash('sha256', NODE_SCRATCH, encoding);
}

const toLatin1 = (digest: Uint8Array): string =>
  Buffer.from(digest.buffer, digest.byteOffset, digest.byteLength).toString('binary');

/** SHA-256(0x00 || data); strings are hashed as UTF-8. */
export function leafHash(data: Uint8Array | string): Buffer {
  return Buffer.from(leafDigest(data), 'binary');
}

/** SHA-256(0x01 || left || right). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  const buf = Buffer.allocUnsafe(1 + left.length + right.length);
  buf[0] = NODE_PREFIX[0]!;
  buf.set(left, 1);
  buf.set(right, 1 + left.length);
  return Buffer.from(hash('sha256', buf, 'binary'), 'binary');
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
  /** The subtree roots as latin1 digests (see leafDigest). */
  private readonly nodes: string[];
  private count: number;

  constructor(nodes: readonly Uint8Array[] = [], size = 0) {
    this.count = MerkleFrontier.checked(nodes.length, size);
    for (const n of nodes) {
      if (n.byteLength !== 32) throw new Error('Merkle frontier nodes must be 32-byte SHA-256 hashes');
    }
    this.nodes = nodes.map(toLatin1);
  }

  private static checked(nodes: number, size: number): number {
    if (!Number.isSafeInteger(size) || size < 0) throw new Error(`invalid Merkle tree size ${size}`);
    if (nodes !== popcount(size)) {
      throw new Error(`Merkle frontier of a ${size}-leaf tree needs ${popcount(size)} nodes, got ${nodes}`);
    }
    return size;
  }

  /** Rebuilds a frontier from its persisted form (ChainHead.frontier + sequence). */
  static fromTagged(frontier: readonly string[], size: number): MerkleFrontier {
    for (const h of frontier) {
      if (!isTaggedHash(h)) throw new Error(`invalid Merkle frontier entry ${JSON.stringify(h)}`);
    }
    const tree = new MerkleFrontier([], 0);
    tree.count = MerkleFrontier.checked(frontier.length, size);
    for (const h of frontier) tree.nodes.push(Buffer.from(h.slice(7), 'hex').toString('binary'));
    return tree;
  }

  /** Number of leaves appended so far. */
  get size(): number {
    return this.count;
  }

  /** Appends one leaf, given as its leafHash(). */
  append(leaf: Uint8Array): void {
    if (leaf.byteLength !== 32) throw new Error('Merkle leaf must be a 32-byte SHA-256 leaf hash');
    this.push(toLatin1(leaf));
  }

  /** Appends the leaf of `data` (leafHash(data) without a Buffer in between). */
  appendData(data: string): void {
    this.push(leafDigest(data));
  }

  private push(leaf: string): void {
    let node = leaf;
    // Each trailing 1 bit of the old size is a perfect subtree of the new leaf's size: merge them.
    for (let s = this.count; s % 2 === 1; s = (s - 1) / 2) {
      node = nodeDigest(this.nodes.pop()!, node, 'binary');
    }
    this.nodes.push(node);
    this.count++;
  }

  /**
   * Merkle Tree Hash of all leaves so far. For an empty tree this is SHA-256 of the empty string,
   * as RFC 6962 defines it, rather than an error.
   */
  root(): Buffer {
    return Buffer.from(this.rootDigest('binary'), 'binary');
  }

  /** root() as `sha256:<hex>`. */
  rootTagged(): string {
    return `sha256:${this.rootDigest('hex')}`;
  }

  private rootDigest(encoding: 'binary' | 'hex'): string {
    // RFC 6962 splits at the largest power of two below n, which is exactly the leftmost perfect
    // subtree; so the root is the right-to-left fold of the frontier.
    const n = this.nodes.length;
    if (n === 0) return EMPTY_TREE_HASH.toString(encoding);
    if (n === 1)
      return encoding === 'binary' ? this.nodes[0]! : Buffer.from(this.nodes[0]!, 'binary').toString('hex');
    let acc = this.nodes[n - 1]!;
    for (let i = n - 2; i > 0; i--) acc = nodeDigest(this.nodes[i]!, acc, 'binary');
    return nodeDigest(this.nodes[0]!, acc, encoding);
  }

  /** Persistable form: `sha256:<hex>` per node, largest subtree first. */
  toTagged(): string[] {
    return this.nodes.map((n) => tagDigest(Buffer.from(n, 'binary')));
  }

  clone(): MerkleFrontier {
    const copy = new MerkleFrontier([], 0);
    copy.count = this.count;
    copy.nodes.push(...this.nodes);
    return copy;
  }
}
