import { Kysely, SqliteDialect } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  approverKey,
  createKey,
  ManualClock,
  openApproval,
  resolveApproval,
  setTier,
} from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { Database } from '../../storage/schema.js';
import { createApprovalRepository } from './repository.js';

// Resolutions made without moving the clock share their resolvedAt: the ties paging must order.
const clock = new ManualClock();
const t = useTestApp({}, { clock });

interface Listed {
  id: string;
  status: string;
  resolvedAt: string;
}

let a: Tenant;
let b: Tenant;

async function teamTenant(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
  return tenant;
}

async function opened(tenant: Tenant, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await openApproval(t, tenant, { toolName: 'wire', arguments: { amount: i } });
    if (res.statusCode !== 201) throw new Error(res.body);
    ids.push(res.json().id);
  }
  return ids;
}

async function resolveAll(tenant: Tenant, ids: string[]): Promise<void> {
  for (const [i, id] of ids.entries()) {
    const res = await resolveApproval(t, tenant, id, i % 2 ? 'deny' : 'approve');
    if (res.statusCode !== 200) throw new Error(res.body);
  }
}

const list = (headers: Record<string, string>, query = '') =>
  t.inject({ method: 'GET', url: `/v1/approvals/resolved${query}`, headers });

/** Every page of `limit` rows, read in turn until one says nothing follows. */
async function allPages(headers: Record<string, string>, limit: number): Promise<Listed[]> {
  const rows: Listed[] = [];
  for (let offset = 0; ; offset += limit) {
    const res = await list(headers, `?limit=${limit}&offset=${offset}`);
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    rows.push(...body.data);
    if (!body.pagination.hasMore) return rows;
  }
}

beforeAll(async () => {
  a = await teamTenant();
  b = await teamTenant();
  // A: three resolved at one instant, two a second later, two more a second after that; B resolves
  // three at the same instants as A. A also has one pending and one that expires: neither is listed.
  const [a1, a2, a3, b1] = [await opened(a, 3), await opened(a, 2), await opened(a, 2), await opened(b, 3)];
  await resolveAll(a, a1!);
  await resolveAll(b, b1!.slice(0, 1));
  clock.advance(1);
  await resolveAll(a, a2!);
  await resolveAll(b, b1!.slice(1, 2));
  clock.advance(1);
  await resolveAll(a, a3!);
  await resolveAll(b, b1!.slice(2));
  await opened(a, 1);
  const expiring = await openApproval(t, a, { toolName: 'wire', expiresInSeconds: 60 });
  expect(expiring.statusCode).toBe(201);
  clock.advance(61);
});

describe('GET /v1/approvals/resolved', () => {
  it('pages newest resolution first, equal times by id: no row repeated or skipped', async () => {
    const whole = (await list(asUser(a), '?limit=200')).json().data as Listed[];
    expect(whole).toHaveLength(7);
    // The order is total: newest resolution first and, at one instant, the greater id first.
    for (let i = 1; i < whole.length; i++) {
      const [prev, cur] = [whole[i - 1]!, whole[i]!];
      expect(prev.resolvedAt >= cur.resolvedAt).toBe(true);
      if (prev.resolvedAt === cur.resolvedAt) expect(prev.id > cur.id).toBe(true);
    }
    // The ties are real: three at the oldest instant, two at each later one.
    expect(new Set(whole.map((r) => r.resolvedAt)).size).toBe(3);
    // Pages of 2 and of 3 cut through the ties; read twice, they give the same rows in the same order.
    for (const limit of [1, 2, 3]) {
      const paged = await allPages(asUser(a), limit);
      expect(paged.map((r) => r.id)).toEqual(whole.map((r) => r.id));
      expect((await allPages(asUser(a), limit)).map((r) => r.id)).toEqual(whole.map((r) => r.id));
    }
    expect(whole.every((r) => r.status === 'approved' || r.status === 'denied')).toBe(true);
  });

  it('answers the page with its total, limit, offset and whether more follow', async () => {
    const page = async (query: string) => {
      const res = await list(keyHeader(a.apiKey), query);
      expect(res.statusCode, res.body).toBe(200);
      return res.json() as { data: Listed[]; pagination: Record<string, unknown> };
    };
    const first = await page('?limit=2');
    expect(first.data).toHaveLength(2);
    expect(first.pagination).toEqual({ total: 7, limit: 2, offset: 0, hasMore: true });
    const last = await page('?limit=2&offset=6');
    expect(last.data).toHaveLength(1);
    expect(last.pagination).toEqual({ total: 7, limit: 2, offset: 6, hasMore: false });
    expect((await page('?limit=2&offset=5')).pagination.hasMore).toBe(false);
    expect((await page('?limit=2&offset=4')).pagination.hasMore).toBe(true);
    // Without a query: the first 50, as before, now with the page.
    expect((await page('')).pagination).toEqual({ total: 7, limit: 50, offset: 0, hasMore: false });
    // Past the end: nothing, with the real total.
    expect(await page('?offset=7')).toEqual({
      data: [],
      pagination: { total: 7, limit: 50, offset: 7, hasMore: false },
    });
    const far = Number.MAX_SAFE_INTEGER;
    expect(await page(`?offset=${far}`)).toEqual({
      data: [],
      pagination: { total: 7, limit: 50, offset: far, hasMore: false },
    });
  });

  it("never counts or lists another organization's approvals", async () => {
    const mine = await allPages(keyHeader(a.apiKey), 2);
    const theirs = await allPages(keyHeader(b.apiKey), 2);
    expect(theirs).toHaveLength(3);
    const ours = new Set(mine.map((r) => r.id));
    expect(theirs.some((r) => ours.has(r.id))).toBe(false);
    expect((await list(asUser(b), '?limit=1')).json().pagination).toEqual({
      total: 3,
      limit: 1,
      offset: 0,
      hasMore: true,
    });
    // A's user naming B's organization is refused before anything is read.
    expectError(
      await list({ ...asUser(a), 'x-organization-id': b.orgId }, '?offset=1'),
      403,
      'authorization_error',
    );
  });

  it('lists the whole organization to every key that reads approvals, as to its users', async () => {
    const project = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: asUser(a),
      payload: { organizationId: a.orgId, name: 'Second' },
    });
    expect(project.statusCode, project.body).toBe(201);
    const user = (await list(asUser(a), '?limit=200')).json();
    for (const headers of [
      keyHeader(a.apiKey),
      keyHeader(project.json().apiKey),
      keyHeader(await approverKey(t, a)),
    ]) {
      expect((await list(headers, '?limit=200')).json()).toEqual(user);
    }
    // A key without the scopes that read approvals is refused, offset or not.
    const drafts = await createKey(t, a, ['policy-drafts:approve'], 'drafts');
    expectError(await list(keyHeader(drafts), '?offset=2'), 403, 'authorization_error');
  });

  it.each([
    ['offset', '-1'],
    ['offset', '1.5'],
    ['offset', '0x10'],
    ['offset', '1e1'],
    ['offset', ' 3'],
    ['offset', ''],
    ['offset', 'two'],
    ['offset', '9007199254740992'],
    ['limit', '0'],
    ['limit', '201'],
    ['limit', 'ten'],
  ])('refuses %s=%j with 400 in the error envelope', async (name, value) => {
    const res = await list(asUser(a), `?${name}=${encodeURIComponent(value)}`);
    expectError(res, 400, 'validation_failed');
    expect(res.json()).toEqual({
      error: {
        code: 'validation_failed',
        message:
          name === 'offset'
            ? 'querystring/offset must be an integer >= 0'
            : 'querystring/limit must be an integer from 1 to 200',
      },
    });
  });
});

describe('the query of a page of resolved approvals', () => {
  // The index's condition must be repeated word for word: a condition with bound values (`status in
  // (?, ?)`) would not be known to imply the index's, and every page would sort the whole history.
  it.skipIf(process.env.SVC_TEST_DATABASE_URL)(
    'reads the partial index approvals_resolved, in its order',
    async () => {
      const handle = t.store.sqlite!;
      const sent: { sql: string; parameters: readonly unknown[] }[] = [];
      const db = new Kysely<Database>({
        dialect: new SqliteDialect({ database: handle }),
        log: (e) => {
          if (e.level === 'query') sent.push({ sql: e.query.sql, parameters: e.query.parameters });
        },
      });
      await createApprovalRepository(db).listResolved(a.orgId, 50, 50);
      const page = sent.find((q) => /order by/i.test(q.sql));
      expect(page).toBeDefined();
      const plan = handle.prepare(`explain query plan ${page!.sql}`).all(...page!.parameters) as {
        detail: string;
      }[];
      expect(plan.map((p) => p.detail).join('\n')).toMatch(/USING INDEX approvals_resolved/);
      // Read in the index's order: no sort of the organization's whole history.
      expect(plan.map((p) => p.detail).join('\n')).not.toMatch(/TEMP B-TREE/);
    },
  );
});
