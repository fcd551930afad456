import { generateKeyPairSync, sign } from 'node:crypto';
import {
  type Checkpoint,
  type ConsistencyProof,
  canonicalJson,
  checkCheckpoints,
  formatCheckpointResults,
  type PublicJwk,
  verifyCheckpointConsistency,
  verifyExport,
  verifyReceiptChain,
} from '@svc/sdk/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendReceipts, emptyChainHead } from '../../server/src/ledger/receipt.js';
import { keyHeader, type Tenant, type TestApp } from '../../server/test/helpers.js';
import { rewriteChain } from '../../server/test/ledger.js';
import { createTenant, startServer } from './live.js';

let t: TestApp;
let a: Tenant;
let b: Tenant;
let keys: { keys: PublicJwk[] };
let first: Checkpoint;
let second: Checkpoint;
let exported: string;

const get = async (tenant: Tenant, url: string) =>
  (await t.inject({ method: 'GET', url, headers: keyHeader(tenant.apiKey) })).json();
const sign_ = async (tenant: Tenant) =>
  (
    await t.inject({ method: 'POST', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) })
  ).json() as Checkpoint;

async function decide(tenant: Tenant, n: number) {
  for (let i = 0; i < n; i++) {
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'transfer', arguments: { i } },
    });
  }
}

const exportOf = async (tenant: Tenant) =>
  (await t.inject({ method: 'GET', url: '/v1/receipts/export', headers: keyHeader(tenant.apiKey) })).body;

beforeAll(async () => {
  ({ t } = await startServer());
  a = await createTenant(t);
  b = await createTenant(t);
  await decide(a, 6);
  first = await sign_(a);
  await decide(a, 4);
  second = await sign_(a);
  await decide(b, 2);
  keys = (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json();
  exported = await exportOf(a);
});
afterAll(async () => t.close());

/** A key of our own, to sign what the service never would (two trees at one size). */
function localSigner() {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwk = publicKey.export({ format: 'jwk' }) as { x: string };
  const key: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x: jwk.x, kid: 'local', alg: 'EdDSA' };
  const signCheckpoint = (c: Omit<Checkpoint, 'signature' | 'kid'>): Checkpoint => {
    const unsigned = { ...c, kid: 'local' };
    const signature = sign(null, Buffer.from(canonicalJson(unsigned)), privateKey).toString('base64url');
    return { ...unsigned, signature };
  };
  return { key, signCheckpoint };
}

describe('verifyCheckpointConsistency (RFC 9162 2.1.4)', () => {
  it('accepts a newer checkpoint that extends an older one', async () => {
    expect([first.tree_size, second.tree_size]).toEqual([6, 10]);
    const proof = await get(a, `/v1/receipts/proofs/consistency?first=6&second=10`);
    expect(await verifyCheckpointConsistency(first, second, proof, keys)).toEqual({ ok: true });
    expect(await verifyCheckpointConsistency(first, second, proof.proof, keys.keys)).toEqual({ ok: true });
    // A checkpoint is consistent with itself, with an empty proof.
    expect(await verifyCheckpointConsistency(second, second, [], keys)).toEqual({ ok: true });
    expect(await verifyCheckpointConsistency(second, second, proof.proof, keys)).toMatchObject({
      ok: false,
      code: 'proof_mismatch',
    });
  });

  it.each([
    [
      'a tampered proof hash',
      'inconsistent',
      async (p: ConsistencyProof) => ({
        ...p,
        proof: p.proof.map((h, i) => (i === 0 ? h.slice(0, -1) + (h.endsWith('0') ? '1' : '0') : h)),
      }),
    ],
    ['a proof cut short', 'inconsistent', async (p: ConsistencyProof) => ({ ...p, proof: p.proof.slice(1) })],
    ['a proof for other sizes', 'proof_mismatch', async (p: ConsistencyProof) => ({ ...p, first: 5 })],
    [
      'a malformed proof hash',
      'malformed_proof',
      async (p: ConsistencyProof) => ({ ...p, proof: ['sha256:xyz'] }),
    ],
  ])('refuses %s (%s)', async (_name, code, tamper) => {
    const proof = await tamper(await get(a, `/v1/receipts/proofs/consistency?first=6&second=10`));
    expect(await verifyCheckpointConsistency(first, second, proof, keys)).toMatchObject({ ok: false, code });
  });

  it('refuses swapped, forged, foreign and unpublished checkpoints with a named reason', async () => {
    const proof = await get(a, `/v1/receipts/proofs/consistency?first=6&second=10`);
    expect(await verifyCheckpointConsistency(second, first, proof.proof, keys)).toMatchObject({
      ok: false,
      code: 'size_order',
    });
    const forged = { ...second, root_hash: `sha256:${'2'.repeat(64)}` };
    expect(await verifyCheckpointConsistency(first, forged, proof, keys)).toMatchObject({
      ok: false,
      code: 'bad_signature',
      reason: 'newer checkpoint: the signature does not match the checkpoint',
    });
    expect(await verifyCheckpointConsistency(first, second, proof, { keys: [] })).toMatchObject({
      ok: false,
      code: 'unknown_key',
    });
    const foreign = await sign_(b);
    expect(await verifyCheckpointConsistency(foreign, second, [], keys)).toMatchObject({
      ok: false,
      code: 'organization_mismatch',
    });
  });

  it('calls two different trees signed at one size a fork', async () => {
    const { key, signCheckpoint } = localSigner();
    const { signature: _s, kid: _k, ...base } = first;
    const one = signCheckpoint(base);
    const other = signCheckpoint({ ...base, root_hash: `sha256:${'3'.repeat(64)}` });
    expect(await verifyCheckpointConsistency(one, one, [], [key])).toEqual({ ok: true });
    expect(await verifyCheckpointConsistency(one, other, [], [key])).toMatchObject({
      ok: false,
      code: 'fork',
    });
  });
});

describe('verifyExport: the chain and every checkpoint of it', () => {
  it('accepts the export with both checkpoints', async () => {
    const report = await verifyExport(exported, { checkpoints: [second, first], keys });
    expect(report.ok).toBe(true);
    expect(report.chain).toMatchObject({ ok: true, count: 10, organizationId: a.orgId });
    expect(report.checkpoints).toEqual([
      { tree_size: 6, kid: first.kid, timestamp: first.timestamp, status: 'ok' },
      { tree_size: 10, kid: second.kid, timestamp: second.timestamp, status: 'ok' },
    ]);
    expect(formatCheckpointResults(report.checkpoints)).toMatch(/^OK: 2 checkpoint\(s\) verified/);
  });

  it('leaves a checkpoint beyond the export unchecked, and fails a tampered export', async () => {
    const lines = exported.split('\n').filter((l) => l !== '');
    const short = await verifyExport(lines.slice(0, 8), { checkpoints: [first, second], keys });
    expect(short.ok).toBe(true);
    expect(formatCheckpointResults(short.checkpoints)).toMatch(/; 1 unchecked \(listed below\)/);
    expect(short.checkpoints.map((c) => [c.status, c.code])).toEqual([
      ['ok', undefined],
      ['unchecked', 'not_covered'],
    ]);
    const tampered = [...lines];
    tampered[3] = JSON.stringify({ ...JSON.parse(tampered[3]!), reason: 'nothing happened' });
    const bad = await verifyExport(tampered, { checkpoints: [first, second], keys });
    expect(bad.ok).toBe(false);
    expect(bad.chain.errors[0]).toMatchObject({ line: 4, sequence: 3 });
    expect(bad.checkpoints.map((c) => c.code)).toEqual(['root_mismatch', 'root_mismatch']);
  });

  it('names each bad checkpoint: unpublished key, forged, another organization, a fork', async () => {
    const foreign = await sign_(b);
    const forged = { ...first, last_receipt_hash: `sha256:${'4'.repeat(64)}` };
    const { key, signCheckpoint } = localSigner();
    const { signature: _s, kid: _k, ...base } = second;
    const forkA = signCheckpoint(base);
    const forkB = signCheckpoint({ ...base, root_hash: `sha256:${'5'.repeat(64)}` });
    const keySet = { keys: [...keys.keys, key] };
    const report = await verifyExport(exported, {
      checkpoints: [forged, foreign, forkA, forkB],
      keys: keySet,
    });
    expect(report.ok).toBe(false);
    expect(report.checkpoints.map((c) => c.code)).toEqual([
      'organization_mismatch',
      'bad_signature',
      'fork',
      'fork',
    ]);
  });

  it('leaves a checkpoint of a withdrawn key unchecked under a newer one that verifies, else fails it', async () => {
    const chain = await verifyReceiptChain(exported, { treeSizes: [6, 10] });
    // After a rotation's overlap: the old key is gone from the set, the newest checkpoint is the new key's.
    const { key, signCheckpoint } = localSigner();
    const { signature: _s, kid: _k, ...head } = second;
    const resigned = signCheckpoint(head);
    const results = await checkCheckpoints([first, resigned], { keys: [key] }, chain);
    expect(results.map((c) => [c.tree_size, c.status, c.code])).toEqual([
      [6, 'unchecked', 'unknown_key'],
      [10, 'ok', undefined],
    ]);
    const summary = formatCheckpointResults(results);
    expect(summary).toMatch(
      /^OK: 1 checkpoint\(s\) verified.*; 1 unchecked \(listed below\), neither verified nor refuted/,
    );
    expect(summary).toContain('which the key set does not publish');
    // The newest signed by a key the set does not know, as a rewritten history would be: it fails.
    const newest = await checkCheckpoints([first, second], { keys: [] }, chain);
    expect(newest.map((c) => [c.status, c.code])).toEqual([
      ['failed', 'unknown_key'],
      ['failed', 'unknown_key'],
    ]);
    const alone = await verifyExport(exported, { checkpoints: [first], keys: { keys: [key] } });
    expect(alone.ok).toBe(false);
    expect(alone.checkpoints.map((c) => c.status)).toEqual(['failed']);
  });

  it("finds another organization's receipt spliced into a chain with every hash made anew", async () => {
    const lines = exported.split('\n').filter((l) => l !== '');
    const inputs = lines.map((l, i) => {
      const {
        schema: _s,
        sequence: _q,
        previous_receipt_hash: _p,
        merkle_root: _m,
        receipt_hash: _h,
        ...fields
      } = JSON.parse(l) as Record<string, unknown>;
      return i === 7 ? { ...fields, organization_id: b.orgId } : fields;
    });
    const { receipts } = appendReceipts(emptyChainHead(), inputs as never);
    const report = await verifyReceiptChain(receipts.map((r) => JSON.stringify(r)).join('\n'));
    expect(report.ok).toBe(false);
    expect(report.errors).toHaveLength(1);
    expect(report.errors[0]).toMatchObject({ sequence: 7 });
    expect(report.errors[0]!.problem).toContain(`in the chain of ${a.orgId}`);
  });

  it('detects a history rewritten after the checkpoints, by the export and by a consistency proof', async () => {
    await rewriteChain(t, a.orgId, 2, 'nothing happened');
    await decide(a, 1);
    const third = await sign_(a);
    const rewritten = await exportOf(a);
    // Consistent in itself…
    expect((await verifyReceiptChain(rewritten)).ok).toBe(true);
    // …but not with what was signed before.
    const report = await verifyExport(rewritten, { checkpoints: [first, second, third], keys });
    expect(report.ok).toBe(false);
    expect(report.checkpoints.map((c) => [c.tree_size, c.status, c.code])).toEqual([
      [6, 'failed', 'root_mismatch'],
      [10, 'failed', 'root_mismatch'],
      [11, 'ok', undefined],
    ]);
    expect(report.checkpoints[0]!.problem).toMatch(/the history was changed after it was signed/);
    const proof = await get(a, `/v1/receipts/proofs/consistency?first=6&second=11`);
    expect(await verifyCheckpointConsistency(first, third, proof, keys)).toMatchObject({
      ok: false,
      code: 'inconsistent',
    });
  });
});
