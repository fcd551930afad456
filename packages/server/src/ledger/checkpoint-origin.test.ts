import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import {
  createTenant,
  createTestApp,
  freshDatabase,
  keyHeader,
  type Tenant,
  type TestApp,
  type TestDatabase,
  withTestApp,
} from '../../test/helpers.js';

const run = promisify(execFile);
const OLD_ORIGIN = 'https://old.svc.example';
const NEW_ORIGIN = 'https://new.svc.example';

/** Exit code and output of `svc receipts verify` against the app's export, checkpoints and key set. */
const verify = (app: TestApp, apiKey: string) =>
  run(
    'node',
    [
      ...SVC_FLAGS,
      SVC_BIN,
      'receipts',
      'verify',
      `${app.url}/v1/receipts/export`,
      '--checkpoints',
      `${app.url}/v1/receipts/checkpoints`,
      '--keys',
      `${app.url}/.well-known/svc-keys.json`,
    ],
    { env: { ...process.env, SVC_API_KEY: apiKey } },
  ).then(
    (r) => ({ code: 0, stdout: r.stdout }),
    (e: { code: number; stdout: string }) => ({ code: e.code, stdout: e.stdout }),
  );

async function decide(app: TestApp, tenant: Tenant, n: number) {
  for (let i = 0; i < n; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'transfer', arguments: { i } },
    });
    expect(res.statusCode).toBe(200);
  }
}

const sign = (app: TestApp, tenant: Tenant) =>
  app.inject({ method: 'POST', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) });
const list = async (app: TestApp, tenant: Tenant) =>
  (
    await app.inject({ method: 'GET', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) })
  ).json().data as { tree_size: number; origin: string }[];

/** One database, served first under one base URL, then (restarted) under another. */
let database: TestDatabase;
beforeAll(async () => {
  database = await freshDatabase();
});
afterAll(async () => {
  await database.drop();
});

describe('a checkpoint keeps the origin it was signed with', () => {
  it('verifies with svc receipts verify after a restart under another SVC_BASE_URL', async () => {
    const before = await createTestApp({ baseUrl: OLD_ORIGIN, checkpointIntervalMs: 0 }, { database });
    let tenant: Tenant;
    try {
      tenant = await createTenant(before);
      await decide(before, tenant, 4);
      const signed = await sign(before, tenant);
      expect(signed.statusCode).toBe(201);
      expect(signed.json()).toMatchObject({ origin: OLD_ORIGIN, tree_size: 4 });
    } finally {
      await before.close();
    }

    const after = await createTestApp(
      { baseUrl: NEW_ORIGIN, checkpointIntervalMs: 0 },
      { database, listen: true },
    );
    try {
      const r = await verify(after, tenant.apiKey);
      expect(r.stdout).toContain('OK: 1 checkpoint(s) verified');
      expect(r.code).toBe(0);
      // Served as signed, not under the reading instance's origin.
      expect(await list(after, tenant)).toMatchObject([{ tree_size: 4, origin: OLD_ORIGIN }]);

      // New checkpoints carry the new origin; old and new verify side by side.
      await decide(after, tenant, 2);
      expect((await sign(after, tenant)).json()).toMatchObject({ origin: NEW_ORIGIN, tree_size: 6 });
      expect(await list(after, tenant)).toMatchObject([
        { tree_size: 6, origin: NEW_ORIGIN },
        { tree_size: 4, origin: OLD_ORIGIN },
      ]);
      const both = await verify(after, tenant.apiKey);
      expect(both.stdout).toContain('OK: 2 checkpoint(s) verified');
      expect(both.code).toBe(0);
    } finally {
      await after.close();
    }
  });

  it('serves a row that does not record its origin (signed before it was stored) under the current one', async () => {
    await withTestApp({ baseUrl: NEW_ORIGIN, checkpointIntervalMs: 0 }, { listen: true }, async (app) => {
      const own = await createTenant(app);
      await decide(app, own, 2);
      expect((await sign(app, own)).statusCode).toBe(201);
      // As a row written before migration 0023 is.
      await app.store.db
        .updateTable('checkpoints')
        .set({ origin: null })
        .where('organization_id', '=', own.orgId)
        .execute();
      expect(await list(app, own)).toMatchObject([{ tree_size: 2, origin: NEW_ORIGIN }]);
      const r = await verify(app, own.apiKey);
      expect(r.stdout).toContain('OK: 1 checkpoint(s) verified');
      expect(r.code).toBe(0);
    });
  });
});
