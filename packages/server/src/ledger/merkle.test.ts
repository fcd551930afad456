import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { leafHash, MerkleFrontier, merkleTreeHash, nodeHash } from './merkle.js';

const sha = (...parts: Uint8Array[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
const hex = (b: Buffer) => b.toString('hex');
const L = (d: Buffer) => sha(Buffer.from([0]), d);
const N = (l: Buffer, r: Buffer) => sha(Buffer.from([1]), l, r);

describe('RFC 6962 Merkle Tree Hash', () => {
  const d = ['a', 'b', 'c', 'd', 'e'].map((s) => Buffer.from(s));

  it('hashes the empty tree to SHA-256 of the empty string', () => {
    const empty = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
    expect(hex(merkleTreeHash([]))).toBe(empty);
    expect(hex(new MerkleFrontier().root())).toBe(empty);
  });

  it('leaf and node hashes use the 0x00 / 0x01 prefixes', () => {
    expect(leafHash('a')).toEqual(L(d[0]!));
    expect(leafHash(d[0]!)).toEqual(L(d[0]!));
    expect(nodeHash(L(d[0]!), L(d[1]!))).toEqual(N(L(d[0]!), L(d[1]!)));
  });

  it('computes 1-, 2-, 3- and 5-leaf roots as written out by hand', () => {
    const [a, b, c, dd, e] = d.map(L) as [Buffer, Buffer, Buffer, Buffer, Buffer];
    expect(merkleTreeHash(d.slice(0, 1))).toEqual(a);
    expect(merkleTreeHash(d.slice(0, 2))).toEqual(N(a, b));
    // n=3 splits at k=2: the left subtree is perfect, the lone third leaf is not paired.
    expect(merkleTreeHash(d.slice(0, 3))).toEqual(N(N(a, b), c));
    expect(merkleTreeHash(d.slice(0, 5))).toEqual(N(N(N(a, b), N(c, dd)), e));
  });

  it('matches the Certificate Transparency reference test vectors', () => {
    // From the CT reference implementations (merkle_tree_test): 8 leaves, roots of every prefix.
    const leaves = [
      '',
      '00',
      '10',
      '2021',
      '3031',
      '40414243',
      '5051525354555657',
      '606162636465666768696a6b6c6d6e6f',
    ].map((h) => Buffer.from(h, 'hex'));
    const roots = [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
      'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
      '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
      'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
      '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
    ];
    const f = new MerkleFrontier();
    leaves.forEach((leaf, i) => {
      f.append(leafHash(leaf));
      expect(hex(merkleTreeHash(leaves.slice(0, i + 1)))).toBe(roots[i]);
      expect(hex(f.root())).toBe(roots[i]);
    });
  });
});

describe('MerkleFrontier', () => {
  it('agrees with the reference for every size 1..300, also after a persist/restore', () => {
    const leaves: Buffer[] = [];
    const f = new MerkleFrontier();
    for (let n = 1; n <= 300; n++) {
      const data = randomBytes(1 + (n % 40));
      leaves.push(data);
      f.append(leafHash(data));
      const expected = merkleTreeHash(leaves);
      expect(f.size).toBe(n);
      expect(f.root()).toEqual(expected);
      // O(log n): one node per set bit of n.
      expect(f.toTagged()).toHaveLength(n.toString(2).replaceAll('0', '').length);
      const restored = MerkleFrontier.fromTagged(JSON.parse(JSON.stringify(f.toTagged())), n);
      expect(restored.root()).toEqual(expected);
    }
  });

  it('appendData and rootTagged give what append(leafHash) and root() give', () => {
    const byData = new MerkleFrontier();
    const byLeaf = new MerkleFrontier();
    expect(byData.rootTagged()).toBe(`sha256:${hex(byLeaf.root())}`);
    // Strings with astral characters, lone surrogates and U+0000, hashed as UTF-8 as leafHash does.
    const chars = ['a', 'é', '\u0000', '\ud83d\ude00', '\ud800', '"', '\u00ff'];
    for (let n = 1; n <= 70; n++) {
      const data = Array.from({ length: n % 9 }, (_, i) => chars[(n * 7 + i) % chars.length]).join('');
      byData.appendData(data);
      byLeaf.append(leafHash(data));
      expect(byData.rootTagged()).toBe(`sha256:${hex(byLeaf.root())}`);
      expect(byData.toTagged()).toEqual(byLeaf.toTagged());
    }
  });

  it('accepts digests that are views into a larger buffer', () => {
    const backing = Buffer.concat([Buffer.from('junk'), leafHash('a'), leafHash('b')]);
    const f = new MerkleFrontier();
    f.append(backing.subarray(4, 36));
    f.append(backing.subarray(36, 68));
    expect(f.root()).toEqual(merkleTreeHash([Buffer.from('a'), Buffer.from('b')]));
    expect(nodeHash(backing.subarray(4, 36), backing.subarray(36, 68))).toEqual(f.root());
  });

  it('lists the perfect subtree roots largest first', () => {
    const d = ['a', 'b', 'c', 'd', 'e', 'f'].map((s) => leafHash(s));
    const f = new MerkleFrontier();
    for (const leaf of d) f.append(leaf);
    const [a, b, c, dd, e, ff] = d as [Buffer, Buffer, Buffer, Buffer, Buffer, Buffer];
    expect(f.toTagged()).toEqual([N(N(a, b), N(c, dd)), N(e, ff)].map((h) => `sha256:${hex(h)}`));
  });

  it('rejects a frontier that does not fit its size, and malformed hashes', () => {
    const h = `sha256:${'ab'.repeat(32)}`;
    expect(() => MerkleFrontier.fromTagged([h], 3)).toThrow(/needs 2 nodes/);
    expect(() => MerkleFrontier.fromTagged([], 1)).toThrow(/needs 1 nodes/);
    expect(() => MerkleFrontier.fromTagged(['sha256:xyz'], 1)).toThrow(/invalid Merkle frontier entry/);
    expect(() => MerkleFrontier.fromTagged([], -1)).toThrow(/invalid Merkle tree size/);
    expect(() => new MerkleFrontier().append(Buffer.alloc(31))).toThrow(/32-byte/);
    expect(() => new MerkleFrontier([Buffer.alloc(31)], 1)).toThrow(/32-byte/);
    expect(() => new MerkleFrontier([Buffer.alloc(33)], 1)).toThrow(/32-byte/);
  });

  it('handles sizes beyond 32-bit arithmetic', () => {
    const size = 2 ** 40 + 3;
    const nodes = [leafHash('x'), leafHash('y'), leafHash('z')];
    const f = new MerkleFrontier(nodes, size);
    f.append(leafHash('w'));
    expect(f.size).toBe(size + 1);
    expect(f.toTagged()).toHaveLength(2);
  });

  it('clone() and fromTagged() do not share state', () => {
    const f = new MerkleFrontier();
    f.append(leafHash('a'));
    const tagged = f.toTagged();
    const g = f.clone();
    g.append(leafHash('b'));
    expect(f.size).toBe(1);
    expect(f.toTagged()).toEqual(tagged);
  });
});
