import { sha256 } from './hash.js';

/** RFC 6962 / RFC 9162 Merkle trees: leaf SHA-256(0x00 || data), node SHA-256(0x01 || left || right). */

const encoder = new TextEncoder();

export async function leafHash(data: Uint8Array | string): Promise<Uint8Array> {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  const buf = new Uint8Array(bytes.length + 1);
  buf[0] = 0x00;
  buf.set(bytes, 1);
  return sha256(buf);
}

export async function nodeHash(left: Uint8Array, right: Uint8Array): Promise<Uint8Array> {
  const buf = new Uint8Array(1 + left.length + right.length);
  buf[0] = 0x01;
  buf.set(left, 1);
  buf.set(right, 1 + left.length);
  return sha256(buf);
}

/** The roots of the perfect subtrees of an append-only tree, largest first: append and root in O(log n). */
export class MerkleFrontier {
  private readonly nodes: Uint8Array[];
  private count: number;

  constructor(nodes: Uint8Array[] = [], size = 0) {
    let bits = 0;
    for (let v = size; v > 0; v = Math.floor(v / 2)) bits += v % 2;
    if (!Number.isSafeInteger(size) || size < 0 || nodes.length !== bits) {
      throw new Error(`a Merkle frontier of ${size} leaves needs ${bits} nodes, got ${nodes.length}`);
    }
    this.nodes = [...nodes];
    this.count = size;
  }

  get size(): number {
    return this.count;
  }

  /** Appends a leaf given as its leafHash(). */
  async append(leaf: Uint8Array): Promise<void> {
    let node = leaf;
    for (let s = this.count; s % 2 === 1; s = (s - 1) / 2) node = await nodeHash(this.nodes.pop()!, node);
    this.nodes.push(node);
    this.count++;
  }

  /** The Merkle Tree Hash of every leaf so far (SHA-256 of nothing for an empty tree). */
  async root(): Promise<Uint8Array> {
    let acc = this.nodes.at(-1);
    if (acc === undefined) return sha256(new Uint8Array(0));
    for (let i = this.nodes.length - 2; i >= 0; i--) acc = await nodeHash(this.nodes[i]!, acc);
    return acc;
  }
}

/**
 * RFC 9162 section 2.1.3.2: does `proof` show the leaf (its leafHash) at `index` in a tree of
 * `size` leaves whose root is `root`? The building block for checking a receipt against a signed
 * checkpoint (a signed tree size and root).
 */
export async function verifyInclusion(
  leaf: Uint8Array,
  index: number,
  size: number,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): Promise<boolean> {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = await nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.length === root.length && r.every((b, i) => b === root[i]);
}

const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * RFC 9162 section 2.1.4.2: does `proof` show that the tree of `size1` leaves with root `root1` is
 * a prefix of the tree of `size2` leaves with root `root2`? Proof hashes bottom-up, as
 * GET /v1/receipts/proofs/consistency lists them.
 */
export async function verifyConsistency(
  size1: number,
  size2: number,
  root1: Uint8Array,
  root2: Uint8Array,
  proof: readonly Uint8Array[],
): Promise<boolean> {
  if (!Number.isSafeInteger(size1) || !Number.isSafeInteger(size2) || size1 < 0 || size1 > size2) {
    return false;
  }
  if (size1 === size2) return proof.length === 0 && equal(root1, root2);
  if (size1 === 0) return proof.length === 0; // the empty tree is a prefix of every tree
  // A first tree that is a perfect subtree is its own first proof node.
  const path = Number.isInteger(Math.log2(size1)) ? [root1, ...proof] : [...proof];
  if (path.length === 0) return false;
  let fn = size1 - 1;
  let sn = size2 - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(fr, root1) && equal(sr, root2);
}
