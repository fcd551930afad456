import { verifyConsistency } from '@svc/sdk/verify';
import { describe, expect, it, vi } from 'vitest';
import { createTenant, keyHeader, withTestApp } from '../../../test/helpers.js';
import { untagDigest } from '../../ledger/canonical.js';

describe('GET /v1/receipts/proofs/consistency without second', () => {
  it('proves up to a checkpoint signed while the request runs, rather than refusing it as beyond the chain', async () => {
    await withTestApp({ checkpointIntervalMs: 0 }, async (app) => {
      const tenant = await createTenant(app);
      const record = () =>
        app.ctx.enforcement.enforce({
          scope: { organizationId: tenant.orgId, projectId: tenant.projectId, tier: 'free' },
          call: { toolName: 'x', arguments: {}, context: {} },
          source: 'server',
          reported: { decision: 'allow', reason: 'r' },
          latencyMs: 1,
        });
      for (let i = 0; i < 3; i++) await record();
      const older = (await app.ctx.checkpoints.now(tenant.orgId))!.checkpoint;
      expect(older.tree_size).toBe(3);

      // A decision is recorded and the timer signs it just as the route looks up the newest checkpoint.
      const checkpoints = app.ctx.checkpoints;
      const list = checkpoints.list.bind(checkpoints);
      vi.spyOn(checkpoints, 'list').mockImplementationOnce(async (org, limit, before) => {
        await record();
        await checkpoints.tick();
        return list(org, limit, before);
      });
      const res = await app.inject({
        method: 'GET',
        url: '/v1/receipts/proofs/consistency?first=3',
        headers: keyHeader(tenant.apiKey),
      });
      expect(res.statusCode, res.body).toBe(200);
      const newer = (await checkpoints.list(tenant.orgId, 1))[0]!;
      expect(newer.tree_size).toBe(4);
      const body = res.json();
      expect(body).toMatchObject({ first: 3, second: 4 });
      expect(
        await verifyConsistency(
          3,
          4,
          untagDigest(older.root_hash),
          untagDigest(newer.root_hash),
          body.proof.map(untagDigest),
        ),
      ).toBe(true);
    });
  });
});
