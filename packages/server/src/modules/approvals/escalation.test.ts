import { beforeAll, describe, expect, it } from 'vitest';
import { openApproval, setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';

let a: Tenant;
let b: Tenant;

const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  b = await createTenant(t);
  for (const x of [a, b]) await setTier(t, x, 'team');
});

interface Pending {
  id: string;
  toolName: string;
  arguments: Record<string, unknown>;
  agentId?: string;
  sessionId?: string;
  escalation?: {
    source: string;
    policy: string;
    constraint: string;
    policyVersion?: number;
    constraints?: { parameter: string; constraint_type: string; message: string }[];
  };
}

async function pending(x: Tenant): Promise<Pending[]> {
  const res = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(x) });
  expect(res.statusCode).toBe(200);
  return res.json().data;
}

describe('GET /v1/approvals/pending: what escalated each approval', () => {
  it('names the policy version and the constraint of a validation, the budget rule of an economic authorization and the pack of a capsule', async () => {
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(a.apiKey),
      payload: {
        toolName: 'wire',
        constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      },
    });
    expect(policy.statusCode).toBe(201);
    const asked = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(a.apiKey),
      payload: { tool_name: 'wire', arguments: { amount: 50, to: 'acct-1' } },
    });
    expect(asked.json().decision).toBe('require_approval');

    await t.inject({
      method: 'PUT',
      url: '/v1/economic/config',
      headers: asUser(a),
      payload: { approvedPayers: ['card'], defaultPayer: 'card', perActionApprovalThresholdUsd: 50 },
    });
    const spend = await t.inject({
      method: 'POST',
      url: '/v1/economic/authorize',
      headers: keyHeader(a.apiKey),
      payload: {
        actionId: 'act-1',
        sessionId: 's-1',
        agentId: 'buyer',
        toolName: 'buy',
        category: 'travel',
        estimatedSpendUsd: 75,
      },
    });
    expect(spend.json().decision).toBe('require_approval');

    const pack = await t.inject({
      method: 'PUT',
      url: '/v1/gateway/packs/big',
      headers: asUser(a),
      payload: { allowed_rails: ['ach'], approval_threshold_usd: '100', quarantine_seconds: 0 },
    });
    expect(pack.statusCode).toBe(201);
    const mint = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: keyHeader(a.apiKey),
      payload: {
        entity_id: 'acme',
        agent_id: 'buyer',
        pack_id: 'big',
        rails: ['ach'],
        beneficiary: { details: { name: 'Vendor', account_number: '123456' } },
        amount_ceiling: { currency: 'USD', amount: '250.00' },
        ttl_seconds: 300,
      },
    });
    expect(mint.statusCode).toBe(409);

    // Opened by hand: nothing escalated it.
    await openApproval(t, a, { toolName: 'manual', arguments: {} });

    const byTool = new Map((await pending(a)).map((p) => [p.toolName, p]));
    expect(byTool.get('wire')!.escalation).toEqual({
      source: 'policy',
      policy: 'policy of tool wire, version 1',
      policyVersion: 1,
      constraint: expect.stringContaining('amount'),
      constraints: [expect.objectContaining({ parameter: 'amount', constraint_type: 'range' })],
    });
    expect(byTool.get('buy')!.escalation).toEqual({
      source: 'economic',
      policy: "spend budgets (the organization's economic configuration)",
      constraint: expect.stringContaining('per-action approval threshold of $50'),
    });
    expect(byTool.get('buy')).toMatchObject({
      arguments: { actionId: 'act-1', estimatedSpendUsd: 75 },
      agentId: 'buyer',
      sessionId: 's-1',
    });
    expect(byTool.get('gateway.capsule')).toMatchObject({ agentId: 'buyer' });
    expect(byTool.get('gateway.capsule')!.escalation).toEqual({
      source: 'gateway',
      policy: 'policy pack big, version 1',
      policyVersion: 1,
      constraint: expect.stringContaining('approval_threshold_usd of 100'),
    });
    expect(byTool.get('manual')!.escalation).toBeUndefined();

    // Another organization sees none of them.
    expect(await pending(b)).toEqual([]);
  });

  it("gives an approval opened by hand on a decision that decision's call, and its escalation only if it asked for a person", async () => {
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(b.apiKey),
      payload: {
        toolName: 'refund',
        constraints: [
          { argumentName: 'amount', maximum: 100 },
          { argumentName: 'amount', maximum: 10, action: 'require_approval' },
        ],
      },
    });
    expect(policy.statusCode).toBe(201);
    const decide = async (amount: number) => {
      const res = await t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(b.apiKey),
        payload: {
          tool_name: 'refund',
          arguments: { amount },
          context: { agent_id: 'clerk', session_id: `s-${amount}` },
        },
      });
      const { decision, metadata } = res.json() as { decision: string; metadata: { decision_id: string } };
      return { decision, id: metadata.decision_id };
    };
    const denied = await decide(500);
    const asked = await decide(50);
    expect([denied.decision, asked.decision]).toEqual(['deny', 'require_approval']);
    for (const d of [denied, asked]) {
      const opened = await openApproval(t, b, { toolName: 'refund', decisionId: d.id });
      expect(opened.statusCode).toBe(201);
    }
    const all = await pending(b);
    const byArgs = new Map(all.map((p) => [p.arguments.amount, p]));
    // The policy denied this call: the person who opened the approval asked, not the policy.
    expect(byArgs.get(500)).toMatchObject({ agentId: 'clerk', sessionId: 's-500' });
    expect(byArgs.get(500)!.escalation).toBeUndefined();
    expect(byArgs.get(50)).toMatchObject({ agentId: 'clerk', sessionId: 's-50' });
    expect(byArgs.get(50)!.escalation).toMatchObject({ source: 'policy', policyVersion: 1 });
  });
});
