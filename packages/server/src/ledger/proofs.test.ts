import { verifyConsistency, verifyInclusion } from '@svc/sdk/verify';
import { describe, expect, it } from 'vitest';
import { leafHash, merkleTreeHash } from './merkle.js';
import {
  arrayHasher,
  consistencyProof as consistencyOf,
  inclusionProof as inclusionOf,
  subtreeHash,
} from './proofs.js';

const inclusionProof = (leaves: Buffer[], m: number, n = leaves.length) =>
  inclusionOf(arrayHasher(leaves), m, n);
const consistencyProof = (leaves: Buffer[], m: number, n = leaves.length) =>
  consistencyOf(arrayHasher(leaves), m, n);

const data = (n: number) => Array.from({ length: n }, (_, i) => Buffer.from(`leaf ${i}`));
const hashes = (n: number) => data(n).map((d) => leafHash(d));

describe('RFC 9162 Merkle proofs', async () => {
  it('subtreeHash over leaf hashes equals the reference MTH over leaf data', async () => {
    for (let n = 0; n <= 20; n++) expect(subtreeHash(hashes(n)).equals(merkleTreeHash(data(n)))).toBe(true);
  });

  it('every leaf of every tree up to 33 leaves has a verifying inclusion proof, and only its own', async () => {
    const leaves = hashes(33);
    for (let n = 1; n <= 33; n++) {
      const root = subtreeHash(leaves, 0, n);
      for (let m = 0; m < n; m++) {
        const path = await inclusionProof(leaves, m, n);
        expect(await verifyInclusion(leaves[m]!, m, n, path, root)).toBe(true);
        // Wrong index, wrong leaf, wrong size, tampered path: all refused.
        if (n > 1) expect(await verifyInclusion(leaves[m]!, (m + 1) % n, n, path, root)).toBe(false);
        expect(await verifyInclusion(leaves[(m + 1) % 33]!, m, n, path, root)).toBe(false);
        expect(await verifyInclusion(leaves[m]!, n, n, path, root)).toBe(false);
        if (path.length > 0) {
          const bad = path.map((p) => Buffer.from(p));
          bad[0]![0]! ^= 1;
          expect(await verifyInclusion(leaves[m]!, m, n, bad, root)).toBe(false);
        }
      }
    }
  });

  it('the RFC 6962 section 2.1.3 examples for a 7-leaf tree', async () => {
    const leaves = hashes(7);
    expect((await inclusionProof(leaves, 0)).length).toBe(3);
    expect((await inclusionProof(leaves, 6)).length).toBe(2);
    expect((await consistencyProof(leaves, 4)).length).toBe(1);
    // PROOF(3, D[7]) = [c, d, g, l]
    const l = subtreeHash(leaves, 4, 7);
    const [c, d, g, last] = await consistencyProof(leaves, 3);
    expect([c, d, g].map((x) => x!.toString('hex'))).toEqual(
      [leaves[2]!, leaves[3]!, subtreeHash(leaves, 0, 2)].map((x) => Buffer.from(x).toString('hex')),
    );
    expect(last!.equals(l)).toBe(true);
  });

  it('consistency proofs verify for every pair of sizes up to 33, and fail for forged roots', async () => {
    const leaves = hashes(33);
    for (let n = 1; n <= 33; n++) {
      const root2 = subtreeHash(leaves, 0, n);
      for (let m = 1; m <= n; m++) {
        const root1 = subtreeHash(leaves, 0, m);
        const proof = await consistencyProof(leaves, m, n);
        expect(await verifyConsistency(m, n, root1, root2, proof)).toBe(true);
        const forged = Buffer.from(root1);
        forged[31]! ^= 1;
        expect(await verifyConsistency(m, n, forged, root2, proof)).toBe(false);
        if (m < n)
          expect(await verifyConsistency(m, n, root1, forged.equals(root1) ? root2 : forged, proof)).toBe(
            false,
          );
      }
    }
  });

  it('a rewritten history is not consistent with a tree head taken before the rewrite', async () => {
    const before = hashes(10);
    const oldRoot = subtreeHash(before, 0, 6);
    const rewritten = [...before];
    rewritten[3] = leafHash(Buffer.from('rewritten'));
    const proof = await consistencyProof(rewritten, 6, 10);
    expect(await verifyConsistency(6, 10, oldRoot, subtreeHash(rewritten), proof)).toBe(false);
  });

  it('refuses impossible ranges', async () => {
    await expect(inclusionProof(hashes(3), 3, 3)).rejects.toThrow(RangeError);
    await expect(consistencyProof(hashes(3), 0, 3)).rejects.toThrow(RangeError);
    expect(await verifyInclusion(hashes(1)[0]!, 1, 1, [], subtreeHash(hashes(1)))).toBe(false);
    expect(await verifyConsistency(5, 4, Buffer.alloc(32), Buffer.alloc(32), [])).toBe(false);
  });
});
