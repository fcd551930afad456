import { beneficiaryHash, fetchCapsuleKeys, verifyCapsule, verifyCapsuleAt } from '@svc/sdk/capsules';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asUser, keyHeader, type Tenant, type TestApp } from '../../server/test/helpers.js';
import { createTenant, startServer } from './live.js';

const PAYEE = { name: 'SDK Supplies', account_number: 'GB29 NWBK 6016 1331 9268 19' };

let t: TestApp;
let baseUrl: string;
let tenant: Tenant;
let capsule: string;
let minted: { id: string; payload: Record<string, unknown> };

beforeAll(async () => {
  ({ t, baseUrl } = await startServer());
  tenant = await createTenant(t);
  const put = await t.inject({
    method: 'PUT',
    url: '/v1/gateway/packs/sdk',
    headers: asUser(tenant),
    payload: { allowed_rails: ['ach'] },
  });
  expect(put.statusCode).toBe(201);
  // Minted over HTTP by a live server, as an agent would get it.
  const res = await fetch(`${baseUrl}/v1/gateway/capsules`, {
    method: 'POST',
    headers: { ...keyHeader(tenant.apiKey), 'content-type': 'application/json' },
    body: JSON.stringify({
      entity_id: 'sdk-entity',
      agent_id: 'sdk-agent',
      pack_id: 'sdk',
      rails: ['ach'],
      beneficiary: { details: PAYEE },
      amount_ceiling: { currency: 'USD', amount: '42.00' },
      ttl_seconds: 300,
    }),
  });
  expect(res.status).toBe(201);
  minted = (await res.json()) as typeof minted;
  capsule = (minted as unknown as { capsule: string }).capsule;
});
afterAll(async () => {
  await t.close();
});

/** The capsule with one character of its `part` (0 header, 1 payload, 2 signature) changed. */
function tampered(part: number): string {
  const parts = capsule.split('.');
  const s = parts[part]!;
  const i = Math.floor(s.length / 2);
  parts[part] = s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
  return parts.join('.');
}

describe('@svc/sdk/capsules against a live server', () => {
  it('verifies a minted capsule with the published key set and answers its payload', async () => {
    const check = await verifyCapsuleAt(baseUrl, capsule);
    expect(check.ok).toBe(true);
    if (!check.ok) return;
    expect(check.payload).toEqual(minted.payload);
    expect(check.payload.beneficiary).toBe(await beneficiaryHash(PAYEE));
    expect(check.payload.organization_id).toBe(tenant.orgId);
  });

  it('refuses a changed signature or payload, an unknown key and an expired capsule', async () => {
    const keys = await fetchCapsuleKeys(baseUrl);
    expect(keys.length).toBeGreaterThan(0);
    const sig = await verifyCapsule(tampered(2), keys);
    expect(sig).toMatchObject({ ok: false, code: 'capsule_signature_invalid' });
    const body = await verifyCapsule(tampered(1), keys);
    expect(body.ok).toBe(false);
    expect(await verifyCapsule(capsule, [])).toMatchObject({ ok: false, code: 'capsule_kid_unknown' });
    const later = new Date(Date.parse(String(minted.payload['expires_at'])) + 60_000);
    expect(await verifyCapsule(capsule, keys, { now: later })).toMatchObject({
      ok: false,
      code: 'capsule_expired',
    });
    expect(await verifyCapsule('not-a-capsule', keys)).toMatchObject({
      ok: false,
      code: 'capsule_payload_invalid',
    });
  });

  it('reads the key set under a base URL with a path, as the client addresses every route', async () => {
    // The service mounted under /svc behind a proxy that strips the prefix.
    const asked: string[] = [];
    const proxy: typeof fetch = async (input, init) => {
      const url = String(input);
      asked.push(url);
      return url.startsWith(`${baseUrl}/svc/`)
        ? fetch(url.replace('/svc/', '/'), init)
        : new Response('', { status: 404 });
    };
    for (const base of [`${baseUrl}/svc`, `${baseUrl}/svc/`]) {
      expect((await fetchCapsuleKeys(base, proxy)).length).toBeGreaterThan(0);
      expect(await verifyCapsuleAt(base, capsule, { fetch: proxy })).toMatchObject({ ok: true });
    }
    expect(new Set(asked)).toEqual(new Set([`${baseUrl}/svc/.well-known/svc-keys.json`]));
    // A base that is no http(s) URL is refused as the client refuses it, before any request.
    await expect(fetchCapsuleKeys('htps://svc.example', proxy)).rejects.toThrow(/baseUrl must be/);
    expect(new Set(asked)).toEqual(new Set([`${baseUrl}/svc/.well-known/svc-keys.json`]));
  });

  it('says why a key set cannot be read', async () => {
    await expect(fetchCapsuleKeys(`${baseUrl}/nothing/`, async () => new Response('{}'))).rejects.toThrow(
      /no keys array/,
    );
    await expect(
      fetchCapsuleKeys(baseUrl, async () => new Response('down', { status: 503 })),
    ).rejects.toThrow(/503/);
  });
});
