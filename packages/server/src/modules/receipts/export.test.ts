import { verifyReceiptChain as verifyReceipts } from '@svc/sdk/verify';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { EXPORT_PAGE } from './export.js';

let a: Tenant;
// More than two pages, so paging joins are exercised.
const N = 2 * EXPORT_PAGE + 7;
const t = useTestApp();
beforeAll(async () => {
  a = await createTenant(t);
  const scope = { organizationId: a.orgId, projectId: a.projectId, tier: 'free' };
  // Recorded through the pipeline directly: 2007 validations would hit the per-key rate limit.
  await Promise.all(
    Array.from({ length: N }, (_, i) =>
      t.ctx.enforcement.enforce({
        scope,
        call: { toolName: `tool-${i % 5}`, arguments: { i }, context: {} },
        source: 'server',
        reported: { decision: i % 3 === 0 ? 'deny' : 'allow', reason: 'test' },
        latencyMs: 1,
      }),
    ),
  );
});

const exportOf = (headers: Record<string, string>, query = '') =>
  t.inject({ method: 'GET', url: `/v1/receipts/export${query}`, headers });

const lines = (body: string) => body.split('\n').filter((l) => l !== '');
const sequences = (body: string) => lines(body).map((l) => JSON.parse(l).sequence as number);

describe('GET /v1/receipts/export', () => {
  it('streams the whole chain as NDJSON in sequence order, and it verifies', async () => {
    const res = await exportOf(keyHeader(a.apiKey));
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
    expect(res.headers['x-chain-length']).toBe(String(N));
    expect(res.headers['x-next-after']).toBeUndefined();
    expect(res.body.endsWith('\n')).toBe(true);
    expect(sequences(res.body)).toEqual(Array.from({ length: N }, (_, i) => i));
    const report = await verifyReceipts(res.body.split('\n'));
    expect(report.errors).toEqual([]);
    expect(report).toMatchObject({ ok: true, count: N });
    const stored = await t.store.db
      .selectFrom('chain_heads')
      .select('last_hash')
      .where('organization_id', '=', a.orgId)
      .executeTakeFirstOrThrow();
    expect(report.lastHash).toBe(stored.last_hash);
    // A user of the organization gets the same bytes.
    expect((await exportOf(asUser(a))).body).toBe(res.body);
  });

  it('continues after a cursor and stops at a limit, announcing where to resume', async () => {
    const page = await exportOf(keyHeader(a.apiKey), '?limit=10');
    expect(sequences(page.body)).toEqual(Array.from({ length: 10 }, (_, i) => i));
    expect(page.headers['x-next-after']).toBe('9');
    const next = await exportOf(keyHeader(a.apiKey), `?after=${page.headers['x-next-after']}&limit=1500`);
    expect(sequences(next.body)).toEqual(Array.from({ length: 1500 }, (_, i) => i + 10));
    expect(next.headers['x-next-after']).toBe('1509');
    const tail = await exportOf(keyHeader(a.apiKey), '?after=1509');
    expect(sequences(tail.body)).toEqual(Array.from({ length: N - 1510 }, (_, i) => i + 1510));
    expect(tail.headers['x-next-after']).toBeUndefined();
    // The three parts together are the chain.
    const joined = [page.body, next.body, tail.body].join('');
    expect((await verifyReceipts(joined.split('\n'))).ok).toBe(true);
    const exact = await exportOf(keyHeader(a.apiKey), `?after=${N - 3}&limit=2`);
    expect(sequences(exact.body)).toEqual([N - 2, N - 1]);
    expect(exact.headers['x-next-after']).toBeUndefined();
  });

  it('answers an empty body past the end and for an organization without receipts', async () => {
    const past = await exportOf(keyHeader(a.apiKey), `?after=${N + 5}`);
    expect(past.statusCode).toBe(200);
    expect(past.body).toBe('');
    expect(past.headers['x-chain-length']).toBe(String(N));
    const empty = await exportOf(keyHeader((await createTenant(t)).apiKey));
    expect(empty.body).toBe('');
    expect(empty.headers['x-chain-length']).toBe('0');
  });

  it.each([
    ['after=-1', 'after'],
    ['after=x', 'after'],
    ['after=1.5', 'after'],
    ['limit=0', 'limit'],
    ['limit=100001', 'limit'],
    ['limit=', 'limit'],
  ])('rejects %s with 400 naming the parameter', async (query, name) => {
    const res = await exportOf(keyHeader(a.apiKey), `?${query}`);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(name);
  });

  it('needs authentication, and users must name their organization', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/receipts/export' }), 401, 'unauthorized');
    expectError(await exportOf(keyHeader('svc_nope')), 401, 'invalid_api_key');
    expectError(await exportOf(bearer(a.token)), 400, 'missing_organization');
  });

  it('exports only the caller organization', async () => {
    const b = await createTenant(t);
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(b.apiKey),
      payload: { tool_name: 'b-tool', arguments: {} },
    });
    const own = await exportOf(keyHeader(b.apiKey));
    expect(own.headers['x-chain-length']).toBe('1');
    expect(lines(own.body).map((l) => JSON.parse(l).organization_id)).toEqual([b.orgId]);
    const foreign = { ...bearer(b.token), 'x-organization-id': a.orgId };
    expectError(await exportOf(foreign), 403, 'authorization_error');
  });
});
