import { describe, expect, it } from 'vitest';
import {
  approverKey,
  collectEvents,
  ManualClock,
  openApproval,
  receiptsOf,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, TEST_PG_URL, type Tenant, type TestApp } from '../../../test/helpers.js';

const clock = new ManualClock();

/** Two application instances on one PostgreSQL database, each with its own sweeper and event bus. */
describe.skipIf(!TEST_PG_URL)('approvals on two instances sharing PostgreSQL', () => {
  const a = useTestApp({}, { clock });
  const b = useTestApp({}, () => ({ database: a.database, clock }));

  async function teamTenant(): Promise<Tenant> {
    const tenant = await createTenant(a);
    await setTier(a, tenant, 'team');
    return tenant;
  }

  it('an approve on one and a deny on the other: one wins, one event, one receipt', async () => {
    const tenant = await teamTenant();
    const key = await approverKey(a, tenant);
    for (let i = 0; i < 10; i++) {
      const id = (await openApproval(a, tenant, { toolName: 'wire', arguments: { i } })).json().id;
      const seenA = collectEvents(a, tenant.orgId);
      const seenB = collectEvents(b, tenant.orgId);
      const before = (await receiptsOf(a, tenant.orgId)).length;
      const answers = await Promise.all([
        resolveApproval(a, key, id, 'approve', 'pat'),
        resolveApproval(b, key, id, 'deny', 'sam'),
      ]);
      seenA.stop();
      seenB.stop();
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 400]);
      const won = answers.find((r) => r.statusCode === 200)!.json();
      const resolved = [...seenA.events, ...seenB.events].filter((e) => e.type === 'approval.resolved');
      expect(resolved).toHaveLength(1);
      expect(resolved[0]!.data).toMatchObject({ approvalId: id, resolvedBy: won.resolvedBy });
      expect((await receiptsOf(a, tenant.orgId)).length).toBe(before + 1);
    }
  });

  it('one approval presented on both at once allows one call', async () => {
    const tenant = await teamTenant();
    const policy = await a.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: {
        toolName: 'wire',
        constraints: [{ argumentName: 'amount', enabled: true, maximum: 10, action: 'require_approval' }],
      },
    });
    expect(policy.statusCode).toBe(201);
    const validate = (app: TestApp, amount: number, context: Record<string, unknown>) =>
      app.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(tenant.apiKey),
        payload: { tool_name: 'wire', arguments: { amount }, context },
      });
    for (let i = 0; i < 5; i++) {
      const id = (await validate(a, 50 + i, {})).json().approval_id;
      expect((await resolveApproval(a, tenant, id, 'approve')).statusCode).toBe(200);
      const answers = await Promise.all([
        validate(a, 50 + i, { approval_id: id }),
        validate(b, 50 + i, { approval_id: id }),
      ]);
      expect(answers.map((r) => r.json().decision).sort()).toEqual(['allow', 'deny']);
    }
  });

  it('a resolve racing both sweepers past expiry: 410, the approval expired and announced once', async () => {
    const tenant = await teamTenant();
    await a.ctx.approvals.stopSweeper();
    await b.ctx.approvals.stopSweeper();
    for (let i = 0; i < 5; i++) {
      const id = (await openApproval(a, tenant, { toolName: 'wire', expiresInSeconds: 60 })).json().id;
      clock.advance(60);
      const seenA = collectEvents(a, tenant.orgId);
      const seenB = collectEvents(b, tenant.orgId);
      const [res, sweptA, sweptB] = await Promise.all([
        resolveApproval(b, tenant, id, 'approve'),
        a.ctx.approvals.sweep(),
        b.ctx.approvals.sweep(),
      ]);
      seenA.stop();
      seenB.stop();
      expect(res.statusCode).toBe(410);
      expect(sweptA + sweptB).toBe(1);
      const events = [...seenA.events, ...seenB.events];
      expect(events.map((e) => [e.type, e.data.approvalId])).toEqual([['approval.expired', id]]);
    }
  });
});
