import { verifyCheckpointSignature, verifyConsistency, verifyInclusion } from '@svc/sdk/verify';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import {
  ADMIN_TOKEN,
  asUser,
  bearer,
  createTenant,
  createTestApp,
  expectError,
  keyHeader,
  type Tenant,
  withTestApp,
} from '../../../test/helpers.js';
import { rewriteChain } from '../../../test/ledger.js';
import { untagDigest } from '../../ledger/canonical.js';
import { type Checkpoint, RESCAN_AFTER_MS } from '../../ledger/checkpoints.js';
import { leafHash } from '../../ledger/merkle.js';
import type { Receipt } from '../../ledger/model.js';
import { receiptLeafData } from '../../ledger/receipt.js';

let a: Tenant;
let b: Tenant;

async function record(tenant: Tenant, n: number, from = 0) {
  const scope = { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' };
  for (let i = from; i < from + n; i++) {
    await t.ctx.enforcement.enforce({
      scope,
      call: { toolName: 'pay', arguments: { amount: i }, context: {} },
      source: 'server',
      reported: { decision: 'allow', reason: `call ${i}` },
      latencyMs: 1,
    });
  }
}

const get = (tenant: Tenant, url: string) =>
  t.inject({ method: 'GET', url, headers: keyHeader(tenant.apiKey) });
const post = (tenant: Tenant, url: string) =>
  t.inject({ method: 'POST', url, headers: keyHeader(tenant.apiKey) });
const jwks = async () => (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json().keys;
const exported = async (tenant: Tenant): Promise<Receipt[]> =>
  (await get(tenant, '/v1/receipts/export')).body
    .split('\n')
    .filter((l) => l)
    .map((l) => JSON.parse(l));

const t = useTestApp({ checkpointIntervalMs: 0 });
beforeAll(async () => {
  // The timer is off: checkpoints here are taken on demand, so each test knows the sizes.
  a = await createTenant(t);
  b = await createTenant(t);
  await record(a, 11);
});

describe('signed checkpoints', () => {
  let first: Checkpoint;

  it('POST /v1/receipts/checkpoints signs the chain as it is; again without growth returns the same', async () => {
    const res = await post(a, '/v1/receipts/checkpoints');
    expect(res.statusCode).toBe(201);
    first = res.json();
    expect(first).toMatchObject({
      schema: 'svc.checkpoint/1',
      origin: t.config.baseUrl,
      organization_id: a.orgId,
      tree_size: 11,
    });
    expect(await verifyCheckpointSignature(first, await jwks())).toEqual({ ok: true });
    const receipts = await exported(a);
    // The checkpoint names the last receipt and the root that receipt carries.
    expect(first.last_receipt_hash).toBe(receipts[10]!.receipt_hash);
    expect(first.root_hash).toBe(receipts[10]!.merkle_root);
    const again = await post(a, '/v1/receipts/checkpoints');
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first);
  });

  it('serves the latest, by size and the list newest first; 404 for a size never signed', async () => {
    await record(a, 5, 11);
    const second = (await post(a, '/v1/receipts/checkpoints')).json();
    expect(second.tree_size).toBe(16);
    expect((await get(a, '/v1/receipts/checkpoints/latest')).json()).toEqual(second);
    expect((await get(a, '/v1/receipts/checkpoints/11')).json()).toEqual(first);
    const list = (await get(a, '/v1/receipts/checkpoints')).json().data;
    expect(list.map((c: Checkpoint) => c.tree_size)).toEqual([16, 11]);
    expect((await get(a, '/v1/receipts/checkpoints?before=16')).json().data).toEqual([first]);
    expectError(await get(a, '/v1/receipts/checkpoints/12'), 404, 'not_found');
    expectError(await get(a, '/v1/receipts/checkpoints/abc'), 400, 'validation_failed');
    expect((await get(a, '/v1/receipts/checkpoints/0')).json().error.message).toBe(
      'params/treeSize must be an integer >= 1',
    );
  });

  it('inclusion proofs of every receipt verify against the checkpoint root', async () => {
    const receipts = await exported(a);
    for (const r of receipts) {
      const res = await get(a, `/v1/receipts/proofs/inclusion?sequence=${r.sequence}&tree_size=16`);
      expect(res.statusCode).toBe(200);
      const proof = res.json();
      const leaf = leafHash(receiptLeafData(r as unknown as Record<string, unknown>));
      expect(proof.leaf_hash).toBe(`sha256:${leaf.toString('hex')}`);
      const root = untagDigest(proof.checkpoint.root_hash);
      expect(await verifyInclusion(leaf, r.sequence, 16, proof.audit_path.map(untagDigest), root)).toBe(true);
    }
    // Without tree_size: a checkpoint covering the receipt is chosen (or signed).
    const latest = (await get(a, '/v1/receipts/proofs/inclusion?sequence=3')).json();
    expect(latest.checkpoint.tree_size).toBe(16);
  });

  it('a consistency proof links the two checkpoints', async () => {
    const older = (await get(a, '/v1/receipts/checkpoints/11')).json();
    const newer = (await get(a, '/v1/receipts/checkpoints/latest')).json();
    const res = (await get(a, '/v1/receipts/proofs/consistency?first=11')).json();
    expect(res).toMatchObject({ first: 11, second: 16 });
    expect(
      await verifyConsistency(
        11,
        16,
        untagDigest(older.root_hash),
        untagDigest(newer.root_hash),
        res.proof.map(untagDigest),
      ),
    ).toBe(true);
  });

  it('refuses impossible proofs with 400 or 404, never 500', async () => {
    expectError(await get(a, '/v1/receipts/proofs/inclusion?sequence=99'), 404, 'not_found');
    expectError(
      await get(a, '/v1/receipts/proofs/inclusion?sequence=5&tree_size=5'),
      400,
      'validation_failed',
    );
    expectError(await get(a, '/v1/receipts/proofs/inclusion?sequence=-1'), 400, 'validation_failed');
    expectError(await get(a, '/v1/receipts/proofs/consistency?first=17&second=16'), 400, 'validation_failed');
    expectError(await get(a, '/v1/receipts/proofs/consistency?first=1&second=999'), 400, 'validation_failed');
  });

  it('is per organization: another tenant sees none of it, and an empty chain has nothing to sign', async () => {
    expect((await get(b, '/v1/receipts/checkpoints')).json().data).toEqual([]);
    expectError(await get(b, '/v1/receipts/checkpoints/11'), 404, 'not_found');
    expectError(await get(b, '/v1/receipts/checkpoints/latest'), 404, 'not_found');
    expectError(await get(b, '/v1/receipts/proofs/inclusion?sequence=0'), 404, 'not_found');
    expectError(await post(b, '/v1/receipts/checkpoints'), 409, 'conflict');
    // A member user reads its organization's checkpoints with a JWT too.
    expect(
      (await t.inject({ method: 'GET', url: '/v1/receipts/checkpoints', headers: asUser(a) })).json().data,
    ).toHaveLength(2);
  });

  it('detects a rewritten history, even with every hash recomputed, against a checkpoint signed before', async () => {
    const before = (await get(a, '/v1/receipts/checkpoints/latest')).json() as Checkpoint;
    // Whoever controls the database rewrites receipt 4 and recomputes the whole chain consistently.
    await rewriteChain(t, a.orgId, 4, 'rewritten');
    await record(a, 2, 100);
    const after = (await post(a, '/v1/receipts/checkpoints')).json() as Checkpoint;
    // The new checkpoint is validly signed (the service signs what it holds)…
    expect(await verifyCheckpointSignature(after, await jwks())).toEqual({ ok: true });
    // …but the chain it covers does not extend the one signed before the rewrite.
    const proof = (
      await get(a, `/v1/receipts/proofs/consistency?first=${before.tree_size}&second=${after.tree_size}`)
    ).json();
    expect(
      await verifyConsistency(
        before.tree_size,
        after.tree_size,
        untagDigest(before.root_hash),
        untagDigest(after.root_hash),
        proof.proof.map(untagDigest),
      ),
    ).toBe(false);
  });
});

describe('concurrent signing', () => {
  it('of one chain state answers 201 to exactly one request, 200 with the stored checkpoint to the others', async () => {
    const c = await createTenant(t);
    const race = async (size: number) => {
      const answers = await Promise.all(Array.from({ length: 8 }, () => post(c, '/v1/receipts/checkpoints')));
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
      // Every answer is the one checkpoint stored at that size (its signature, its timestamp).
      const stored = (await get(c, `/v1/receipts/checkpoints/${size}`)).json() as Checkpoint;
      for (const r of answers) expect(r.json()).toEqual(stored);
      expect(await verifyCheckpointSignature(stored, await jwks())).toEqual({ ok: true });
    };
    await record(c, 3);
    await race(3);
    await record(c, 2, 3);
    await race(5);
  });
});

describe('checkpoint keys', () => {
  it('a checkpoint signed before a rotation still verifies during the overlap; an unknown key is refused', async () => {
    await withTestApp({ checkpointIntervalMs: 0 }, async (app) => {
      const tenant = await createTenant(app);
      await app.ctx.enforcement.enforce({
        scope: { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' },
        call: { toolName: 'x', arguments: {}, context: {} },
        source: 'server',
        reported: { decision: 'allow', reason: 'r' },
        latencyMs: 1,
      });
      const cp = (
        await app.inject({
          method: 'POST',
          url: '/v1/receipts/checkpoints',
          headers: keyHeader(tenant.apiKey),
        })
      ).json();
      const rotated = await app.inject({
        method: 'POST',
        url: '/v1/admin/signing-keys/rotate',
        headers: bearer(ADMIN_TOKEN),
      });
      expect(rotated.json().previousKid).toBe(cp.kid);
      const keys = (await app.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json().keys;
      expect(await verifyCheckpointSignature(cp, keys)).toEqual({ ok: true });
      // A key set that does not publish the signer (withdrawn after the overlap, or never ours).
      const withdrawn = keys.filter((k: { kid: string }) => k.kid !== cp.kid);
      expect(await verifyCheckpointSignature(cp, withdrawn)).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/does not publish/),
      });
      // A checkpoint whose signature was made by a different key under the same kid is refused.
      const forged = { ...cp, root_hash: `sha256:${'1'.repeat(64)}` };
      expect(await verifyCheckpointSignature(forged, keys)).toMatchObject({ ok: false });
    });
  });

  it('a chain that stopped growing is signed again with the current key after a rotation', async () => {
    await withTestApp({ checkpointIntervalMs: 0 }, async (app) => {
      const tenant = await createTenant(app);
      const idle = await createTenant(app);
      for (const x of [tenant, idle]) {
        await app.ctx.enforcement.enforce({
          scope: { organizationId: x.orgId, projectId: x.projectId, tier: 'free' },
          call: { toolName: 'x', arguments: {}, context: {} },
          source: 'server',
          reported: { decision: 'allow', reason: 'r' },
          latencyMs: 1,
        });
      }
      const call = (x: Tenant, method: 'GET' | 'POST', url: string) =>
        app.inject({ method, url, headers: keyHeader(x.apiKey) });
      const old = (await call(tenant, 'POST', '/v1/receipts/checkpoints')).json();
      expect((await call(idle, 'POST', '/v1/receipts/checkpoints')).json().kid).toBe(old.kid);
      const rotated = await app.inject({
        method: 'POST',
        url: '/v1/admin/signing-keys/rotate',
        headers: bearer(ADMIN_TOKEN),
      });
      const kid = rotated.json().kid;
      expect(kid).not.toBe(old.kid);
      // The key set once the retired key is withdrawn (after the overlap).
      const current = (await app.inject({ method: 'GET', url: '/.well-known/svc-keys.json' }))
        .json()
        .keys.filter((k: { kid: string }) => k.kid !== old.kid);

      // On demand: the chain has not grown, yet its checkpoint is signed again with the current key.
      const again = await call(tenant, 'POST', '/v1/receipts/checkpoints');
      expect(again.statusCode).toBe(201);
      expect(again.json()).toMatchObject({ tree_size: 1, root_hash: old.root_hash, kid });
      expect(await verifyCheckpointSignature(again.json(), current)).toEqual({ ok: true });
      expect((await call(tenant, 'GET', '/v1/receipts/checkpoints/latest')).json()).toEqual(again.json());
      // And once more: nothing to do.
      expect((await call(tenant, 'POST', '/v1/receipts/checkpoints')).statusCode).toBe(200);

      // The timer's pass does the same for every such chain, without being asked.
      await app.ctx.checkpoints.tick();
      const latest = (await call(idle, 'GET', '/v1/receipts/checkpoints/latest')).json();
      expect(latest).toMatchObject({ tree_size: 1, kid });
      expect(await verifyCheckpointSignature(latest, current)).toEqual({ ok: true });
      const proof = (await call(idle, 'GET', '/v1/receipts/proofs/inclusion?sequence=0')).json();
      expect(proof.checkpoint).toEqual(latest);
    });
  });

  it('signs again, a while after a rotation, what another instance signed with the retired key before it knew', async () => {
    const clock = new ManualClock();
    const first = await createTestApp({ checkpointIntervalMs: 0 }, { clock });
    const other = await createTestApp({ checkpointIntervalMs: 0 }, { database: first.database });
    try {
      const tenant = await createTenant(first);
      const decide = () =>
        first.ctx.enforcement.enforce({
          scope: { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' },
          call: { toolName: 'x', arguments: {}, context: {} },
          source: 'server',
          reported: { decision: 'allow', reason: 'r' },
          latencyMs: 1,
        });
      const latest = async () =>
        (
          await first.inject({
            method: 'GET',
            url: '/v1/receipts/checkpoints/latest',
            headers: keyHeader(tenant.apiKey),
          })
        ).json() as Checkpoint;
      await decide();
      // The other instance has read the key set, and keeps it for its 10 s.
      await other.ctx.checkpoints.tick();
      const old = (await latest()).kid;
      const rotated = await first.inject({
        method: 'POST',
        url: '/v1/admin/signing-keys/rotate',
        headers: bearer(ADMIN_TOKEN),
      });
      const kid = rotated.json().kid as string;
      await first.ctx.checkpoints.tick();
      expect(await latest()).toMatchObject({ tree_size: 1, kid });
      // Before it reads the key set again, the other instance signs the grown chain with the old key.
      await decide();
      await other.ctx.checkpoints.tick();
      expect(await latest()).toMatchObject({ tree_size: 2, kid: old });
      await first.ctx.checkpoints.tick();
      expect((await latest()).kid).toBe(old);
      clock.advance(RESCAN_AFTER_MS / 1000);
      await first.ctx.checkpoints.tick();
      expect(await latest()).toMatchObject({ tree_size: 2, kid });
    } finally {
      await other.close();
      await first.close();
    }
  });

  it('answers 503 signing_key_missing when a new checkpoint must be signed and no key loads', async () => {
    const config = { checkpointIntervalMs: 0, signingKeyFile: '/nonexistent/svc-signing.jwk' };
    await withTestApp(config, async (app) => {
      const tenant = await createTenant(app);
      await app.ctx.enforcement.enforce({
        scope: { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' },
        call: { toolName: 'x', arguments: {}, context: {} },
        source: 'server',
        reported: { decision: 'allow', reason: 'r' },
        latencyMs: 1,
      });
      const res = await app.inject({
        method: 'POST',
        url: '/v1/receipts/checkpoints',
        headers: keyHeader(tenant.apiKey),
      });
      expectError(res, 503, 'signing_key_missing');
      expectError(
        await app.inject({
          method: 'GET',
          url: '/v1/receipts/proofs/inclusion?sequence=0',
          headers: keyHeader(tenant.apiKey),
        }),
        503,
        'signing_key_missing',
      );
    });
  });

  it('writes checkpoints on its own while decisions flow, and a final one at shutdown', async () => {
    await withTestApp({ checkpointIntervalMs: 50 }, async (app) => {
      const tenant = await createTenant(app);
      const scope = { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' };
      const enforce = () =>
        app.ctx.enforcement.enforce({
          scope,
          call: { toolName: 'x', arguments: {}, context: {} },
          source: 'server',
          reported: { decision: 'allow', reason: 'r' },
          latencyMs: 1,
        });
      await enforce();
      await expect.poll(async () => (await app.ctx.checkpoints.list(tenant.orgId, 1))[0]?.tree_size).toBe(1);
      await enforce();
      await app.app.close();
      // The shutdown pass signed the second receipt.
      expect((await app.ctx.checkpoints.list(tenant.orgId, 1))[0]?.tree_size).toBe(2);
    });
  });
});
