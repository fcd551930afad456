import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveApproval, setTier } from '../../../test/approvals.js';
import {
  asUser,
  createTenant,
  createTestApp,
  keyHeader,
  type Tenant,
  type TestApp,
} from '../../../test/helpers.js';

let t: TestApp;
let a: Tenant;
let b: Tenant;
let offset = 0;
const clock = { now: () => new Date(Date.now() + offset) };

const PAYEE = { name: 'Big Vendor', account_number: '123456' };
const PACK = { allowed_rails: ['ach'], approval_threshold_usd: '100', quarantine_seconds: 0 };

beforeAll(async () => {
  t = await createTestApp({}, { clock });
  a = await createTenant(t);
  b = await createTenant(t);
  await setTier(t, a, 'team');
  await setTier(t, b, 'team');
  for (const x of [a, b]) {
    const res = await t.inject({
      method: 'PUT',
      url: '/v1/gateway/packs/big',
      headers: asUser(x),
      payload: PACK,
    });
    expect(res.statusCode).toBe(201);
  }
});
afterAll(async () => {
  await t.close();
});

const body = (over: Record<string, unknown> = {}) => ({
  entity_id: 'acme',
  agent_id: 'buyer',
  pack_id: 'big',
  rails: ['ach'],
  beneficiary: { details: PAYEE },
  amount_ceiling: { currency: 'USD', amount: '250.00' },
  ttl_seconds: 300,
  ...over,
});
const mint = (x: Tenant, over: Record<string, unknown> = {}) =>
  t.inject({
    method: 'POST',
    url: '/v1/gateway/capsules',
    headers: keyHeader(x.apiKey),
    payload: body(over),
  });

function errorOf(res: { statusCode: number; json(): unknown; body: string }, status: number, code: string) {
  const err = (res.json() as { error?: Record<string, unknown> }).error;
  if (res.statusCode !== status || err?.['code'] !== code) {
    throw new Error(`expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  }
  return err;
}

/** Mints above the threshold, answering the approval it opened. */
async function requireApproval(x: Tenant, over: Record<string, unknown> = {}) {
  const err = errorOf(await mint(x, over), 409, 'approval_required');
  expect(err['payload_hash']).toMatch(/^sha256:[0-9a-f]{64}$/);
  return { id: err['approval_id'] as string, hash: err['payload_hash'] as string };
}

describe('capsules under an approval', () => {
  it('opens an approval bound to the payload, and mints once it is approved, once', async () => {
    const ap = await requireApproval(a);
    const pending = await t.inject({ method: 'GET', url: `/v1/approvals/${ap.id}`, headers: asUser(a) });
    expect(pending.json()).toMatchObject({ status: 'pending', toolName: 'gateway.capsule' });
    expect(pending.json().arguments).toMatchObject({
      amount_ceiling: { currency: 'USD', amount: '250.00' },
      rail_allowlist: ['ach'],
    });
    // Still pending: the same approval is named again, no new one is opened.
    expect(errorOf(await mint(a, { approval_ref: ap.id }), 409, 'approval_required')['approval_id']).toBe(
      ap.id,
    );
    expect((await resolveApproval(t, a, ap.id, 'approve')).statusCode).toBe(200);
    const minted = await mint(a, { approval_ref: ap.id });
    expect(minted.statusCode).toBe(201);
    expect(minted.json().payload.approval_ref).toBe(ap.id);
    errorOf(await mint(a, { approval_ref: ap.id }), 409, 'approval_already_consumed');
    // Below the threshold no approval is needed.
    expect((await mint(a, { amount_ceiling: { currency: 'USD', amount: '99.99' } })).statusCode).toBe(201);
  });

  it('refuses an approval for another payload, a denied one, an expired one and one of another organization', async () => {
    const ap = await requireApproval(a);
    await resolveApproval(t, a, ap.id, 'approve');
    const other = errorOf(
      await mint(a, { approval_ref: ap.id, amount_ceiling: { currency: 'USD', amount: '251.00' } }),
      409,
      'approval_payload_mismatch',
    );
    expect(other['payload_hash']).toBe(ap.hash);

    const denied = await requireApproval(a, { entity_id: 'denied' });
    await resolveApproval(t, a, denied.id, 'deny');
    errorOf(await mint(a, { entity_id: 'denied', approval_ref: denied.id }), 403, 'approval_denied');

    const late = await requireApproval(a, { entity_id: 'late' });
    offset = 3600 * 1000 + 1000;
    try {
      errorOf(await mint(a, { entity_id: 'late', approval_ref: late.id }), 409, 'approval_expired');
    } finally {
      offset = 0;
    }
    errorOf(await mint(b, { approval_ref: ap.id }), 404, 'approval_not_found');
    // The approval of the first case is still usable by its own payload.
    expect((await mint(a, { approval_ref: ap.id })).statusCode).toBe(201);
  });

  it('lets exactly one of parallel mints use an approval', async () => {
    const ap = await requireApproval(a, { entity_id: 'parallel' });
    await resolveApproval(t, a, ap.id, 'approve');
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => mint(a, { entity_id: 'parallel', approval_ref: ap.id })),
    );
    expect(answers.filter((r) => r.statusCode === 201)).toHaveLength(1);
    for (const r of answers.filter((x) => x.statusCode !== 201)) errorOf(r, 409, 'approval_already_consumed');
  });
});
