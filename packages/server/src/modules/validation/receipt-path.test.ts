import { verifyCheckpointSignature, verifyInclusion } from '@svc/sdk/verify';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { untagDigest } from '../../ledger/canonical.js';
import { leafHash } from '../../ledger/merkle.js';
import { computeReceiptHash, receiptLeafData } from '../../ledger/receipt.js';

let a: Tenant;
const t = useTestApp({ checkpointIntervalMs: 0 });
beforeAll(async () => {
  a = await createTenant(t);
  await t.inject({
    method: 'POST',
    url: '/v1/policies',
    headers: keyHeader(a.apiKey),
    payload: { toolName: 'pay', constraints: [{ argumentName: 'amount', maximum: 100 }] },
  });
});

const validate = (payload: object, headers: Record<string, string> = keyHeader(a.apiKey)) =>
  t.inject({ method: 'POST', url: '/v1/validate', headers, payload });

describe('POST /v1/validate (receipt-enabled validation)', () => {
  it('decides like /v1/tools/validate and returns the whole receipt with where to prove it', async () => {
    const res = await validate({
      tool_name: 'pay',
      arguments: { amount: 500 },
      context: { session_id: 's1' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-ratelimit-limit']).toBeDefined();
    const body = res.json();
    expect(body).toMatchObject({ decision: 'deny', metadata: { policy_version: 1, mode: 'deterministic' } });
    expect(body.failed_constraints[0]).toMatchObject({ parameter: 'amount' });
    const { receipt } = body;
    expect(receipt).toMatchObject({
      schema: 'svc.receipt/1',
      decision_id: body.metadata.decision_id,
      decision: 'deny',
      tool_name: 'pay',
      organization_id: a.orgId,
    });
    // The receipt is self-verifying and identical to the stored one.
    expect(computeReceiptHash(receipt)).toBe(receipt.receipt_hash);
    const stored = await t.inject({
      method: 'GET',
      url: `/v1/decisions/${body.metadata.decision_id}/receipt`,
      headers: keyHeader(a.apiKey),
    });
    expect(stored.json()).toEqual(receipt);

    // Following the proof link gives an inclusion proof against a signed checkpoint.
    expect(body.proof.key_set_url).toBe(`${t.config.baseUrl}/.well-known/svc-keys.json`);
    const url = new URL(body.proof.inclusion_url);
    const proof = (
      await t.inject({ method: 'GET', url: url.pathname + url.search, headers: keyHeader(a.apiKey) })
    ).json();
    const keys = (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json().keys;
    expect(await verifyCheckpointSignature(proof.checkpoint, keys)).toEqual({ ok: true });
    const leaf = leafHash(receiptLeafData(receipt));
    expect(
      await verifyInclusion(
        leaf,
        receipt.sequence,
        proof.tree_size,
        proof.audit_path.map(untagDigest),
        untagDigest(proof.checkpoint.root_hash),
      ),
    ).toBe(true);
  });

  it('allows, and refuses bad bodies and user tokens like the other validation path', async () => {
    expect((await validate({ tool_name: 'pay', arguments: { amount: 5 } })).json().decision).toBe('allow');
    expectError(await validate({ tool_name: 'pay' }), 400, 'validation_failed');
    expectError(await validate({ tool_name: 'pay', arguments: {} }, asUser(a)), 403, 'authorization_error');
    expectError(await validate({ tool_name: 'pay', arguments: {} }, {}), 401, 'unauthorized');
    expectError(
      await validate({ tool_name: 'pay', arguments: {} }, keyHeader('svc_nope')),
      401,
      'invalid_api_key',
    );
  });
});
