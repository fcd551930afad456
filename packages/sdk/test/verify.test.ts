import { createHash } from 'node:crypto';
import {
  type Checkpoint,
  leafHash,
  MerkleFrontier,
  nodeHash,
  receiptHash,
  tag,
  verifyCheckpointSignature,
  verifyInclusion,
  verifyReceiptChain,
  verifyReceiptInclusion,
} from '@svc/sdk/verify';
import { beforeAll, describe, expect, it } from 'vitest';
import { merkleTreeHash } from '../../server/src/ledger/merkle.js';
import { useTestApp } from '../../server/test/fixture.js';
import { keyHeader, type Tenant } from '../../server/test/helpers.js';
import { createTenant, putPolicy } from './live.js';

let tenant: Tenant;
let lines: string[];
const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', {
    mode: 'deterministic',
    constraints: [{ argumentName: 'amount', maximum: 10 }],
  });
  for (let i = 0; i < 13; i++) {
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'pay', arguments: { amount: i, note: 'é ✓ \u2028' } },
    });
  }
  const res = await t.inject({
    method: 'GET',
    url: '/v1/receipts/export',
    headers: keyHeader(tenant.apiKey),
  });
  lines = res.body.split('\n').filter((l) => l !== '');
});

describe('verifyReceiptChain (WebCrypto)', () => {
  it('accepts an exported chain and agrees with the server verifier', async () => {
    expect(lines).toHaveLength(13);
    const report = await verifyReceiptChain(lines.join('\n'));
    // What the server wrote is what the verifier recomputes.
    const last = JSON.parse(lines[12]!);
    expect(report).toEqual({
      ok: true,
      count: 13,
      lastHash: last.receipt_hash,
      merkleRoot: last.merkle_root,
      errors: [],
      warnings: [],
      heads: new Map(),
      organizationId: tenant.orgId,
    });
  });

  it('takes receipt objects and async lines too', async () => {
    const objects = lines.map((l) => JSON.parse(l));
    expect((await verifyReceiptChain(objects)).ok).toBe(true);
    async function* gen() {
      yield* lines;
    }
    expect((await verifyReceiptChain(gen())).ok).toBe(true);
  });

  it.each([
    ['an altered reason', (r: Record<string, unknown>) => ({ ...r, reason: 'nothing to see' })],
    [
      'an altered argument hash',
      (r: Record<string, unknown>) => ({ ...r, argument_hash: `sha256:${'1'.repeat(64)}` }),
    ],
    ['a wrong sequence', (r: Record<string, unknown>) => ({ ...r, sequence: 99 })],
  ])('reports %s at the receipt that was changed', async (_name, tamper) => {
    const bad = [...lines];
    bad[5] = JSON.stringify(tamper(JSON.parse(bad[5]!)));
    const report = await verifyReceiptChain(bad);
    expect(report.ok).toBe(false);
    expect(report.errors[0]!.line).toBe(6);
    expect(report.errors[0]!.problem).toMatch(/^receipt_hash does not match the receipt content/);
    expect(report.count).toBe(13);
  });

  it('reports a removed receipt and garbage lines', async () => {
    const bad = [...lines.slice(0, 4), ...lines.slice(5), 'not json'];
    const report = await verifyReceiptChain(bad);
    expect(report.ok).toBe(false);
    expect(report.count).toBe(12);
    expect(report.errors[0]).toMatchObject({ line: 5, sequence: 5 });
    expect(report.errors[0]!.problem).toMatch(/sequence 5 where 4 was expected \(receipts missing/);
    expect(report.errors.at(-1)).toMatchObject({ line: 13, sequence: null });
    expect(report.errors.at(-1)!.problem).toMatch(/^not valid JSON/);
  });
});

describe('checkpoints and inclusion (docs/receipts.md)', () => {
  const get = async (url: string) =>
    (await t.inject({ method: 'GET', url, headers: keyHeader(tenant.apiKey) })).json();

  it('verifies a checkpoint signature against the published key set, and a receipt inclusion in it', async () => {
    const signed = await t.inject({
      method: 'POST',
      url: '/v1/receipts/checkpoints',
      headers: keyHeader(tenant.apiKey),
    });
    expect([200, 201]).toContain(signed.statusCode);
    const checkpoint = signed.json() as Checkpoint;
    const keys = (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json();
    expect(await verifyCheckpointSignature(checkpoint, keys)).toEqual({ ok: true });
    expect(checkpoint.root_hash).toBe(JSON.parse(lines[checkpoint.tree_size - 1]!).merkle_root);

    for (const sequence of [0, 5, checkpoint.tree_size - 1]) {
      const receipt = JSON.parse(lines[sequence]!);
      const proof = await get(
        `/v1/receipts/proofs/inclusion?sequence=${sequence}&tree_size=${checkpoint.tree_size}`,
      );
      expect(await verifyReceiptInclusion(receipt, proof, checkpoint, keys)).toEqual({ ok: true });
      const altered = { ...receipt, reason: 'something else' };
      expect((await verifyReceiptInclusion(altered, proof, checkpoint, keys)).ok).toBe(false);
    }
    // The checkpoint's last receipt with a forged merkle_root and its receipt_hash recomputed: the
    // leaf (and so the path) does not cover either, the checkpoint does.
    const last = JSON.parse(lines[checkpoint.tree_size - 1]!);
    const lastProof = await get(
      `/v1/receipts/proofs/inclusion?sequence=${checkpoint.tree_size - 1}&tree_size=${checkpoint.tree_size}`,
    );
    const forged = { ...last, merkle_root: `sha256:${'0'.repeat(64)}` };
    forged.receipt_hash = await receiptHash(forged);
    expect(await verifyReceiptInclusion(forged, lastProof, checkpoint, keys)).toMatchObject({
      ok: false,
      code: 'root_mismatch',
    });
    // Another schema is named as such (its hash rules are not these), whatever its hash.
    const future = { ...last, schema: 'svc.receipt/2' };
    future.receipt_hash = await receiptHash(future);
    expect(await verifyReceiptInclusion(future, lastProof, checkpoint, keys)).toMatchObject({
      ok: false,
      code: 'malformed_receipt',
      reason: 'schema is "svc.receipt/2", not svc.receipt/1',
    });
    const proof = await get(`/v1/receipts/proofs/inclusion?sequence=2&tree_size=${checkpoint.tree_size}`);
    const other = JSON.parse(lines[3]!);
    expect(await verifyReceiptInclusion(other, { ...proof, sequence: 3 }, checkpoint, keys)).toMatchObject({
      ok: false,
    });

    // A forged checkpoint, a key that is not in the set, a tampered signature: refused.
    expect(await verifyCheckpointSignature({ ...checkpoint, tree_size: 2 }, keys)).toMatchObject({
      ok: false,
    });
    expect(await verifyCheckpointSignature({ ...checkpoint, kid: 'unknown' }, keys)).toMatchObject({
      ok: false,
      code: 'unknown_key',
      reason: 'signed with key unknown, which the key set does not publish',
    });
    const sig = checkpoint.signature;
    const flipped = `${sig.slice(0, 10)}${sig[10] === 'A' ? 'B' : 'A'}${sig.slice(11)}`;
    expect(await verifyCheckpointSignature({ ...checkpoint, signature: flipped }, keys)).toMatchObject({
      ok: false,
    });
    expect(await verifyCheckpointSignature(checkpoint, { keys: [] })).toMatchObject({ ok: false });
  });
});

describe('Merkle trees (RFC 9162)', () => {
  const data = Array.from({ length: 21 }, (_, i) => new TextEncoder().encode(`leaf ${i}`));

  /** Inclusion proof straight from RFC 9162 section 2.1.3.1 (PATH). */
  function path(m: number, leaves: Uint8Array[]): Uint8Array[] {
    const n = leaves.length;
    if (n <= 1) return [];
    let k = 1;
    while (k * 2 < n) k *= 2;
    if (m < k) return [...path(m, leaves.slice(0, k)), merkleTreeHash(leaves.slice(k))];
    return [...path(m - k, leaves.slice(k)), merkleTreeHash(leaves.slice(0, k))];
  }

  it('computes the same roots as the server, for every size', async () => {
    const tree = new MerkleFrontier();
    expect(tag(await tree.root())).toBe(`sha256:${createHash('sha256').digest('hex')}`);
    for (let n = 1; n <= data.length; n++) {
      await tree.append(await leafHash(data[n - 1]!));
      expect(tag(await tree.root())).toBe(tag(merkleTreeHash(data.slice(0, n))));
    }
  });

  it('verifies every inclusion proof and refuses wrong ones', async () => {
    for (let n = 1; n <= data.length; n++) {
      const leaves = data.slice(0, n);
      const root = merkleTreeHash(leaves);
      for (let m = 0; m < n; m++) {
        const proof = path(m, leaves);
        const leaf = await leafHash(leaves[m]!);
        expect(await verifyInclusion(leaf, m, n, proof, root)).toBe(true);
        if (n > 1) {
          expect(await verifyInclusion(leaf, (m + 1) % n, n, proof, root)).toBe(false);
          const broken = proof.map((p, i) => (i === 0 ? new Uint8Array(p).fill(7) : p));
          expect(await verifyInclusion(leaf, m, n, broken, root)).toBe(false);
        }
        expect(await verifyInclusion(leaf, n, n, proof, root)).toBe(false);
      }
    }
    const leaf = await leafHash(data[0]!);
    expect(await verifyInclusion(leaf, 0, 2, [await nodeHash(leaf, leaf)], leaf)).toBe(false);
  });
});
