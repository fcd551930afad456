import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { type BuildOptions, buildApp } from '../src/app.js';
import { type Config, loadConfig } from '../src/config.js';
import type { AppContext } from '../src/context.js';
import type { Clock } from '../src/lib/clock.js';
import { signUserToken } from '../src/lib/jwt.js';
import { openStore, type Store } from '../src/storage/db.js';
import { migrateToLatest } from '../src/storage/migrate.js';

/** Tests run on SQLite unless SVC_TEST_DATABASE_URL points at PostgreSQL (CI runs both). */
export const TEST_PG_URL = process.env.SVC_TEST_DATABASE_URL?.startsWith('postgres')
  ? process.env.SVC_TEST_DATABASE_URL
  : null;
export const JWT_SECRET = 'test-secret-0123456789abcdef0123456789abcdef';
export const ADMIN_TOKEN = 'admin-test-token';

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

/** A fresh database: a new SQLite file, or a new PostgreSQL schema selected through search_path. */
export async function freshDatabase(): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  if (TEST_PG_URL) {
    const admin = new pg.Client({ connectionString: TEST_PG_URL });
    await admin.connect();
    await admin.query(`create schema ${name}`);
    await admin.end();
    const url = new URL(TEST_PG_URL);
    url.searchParams.set('options', `-c search_path=${name}`);
    return {
      url: url.toString(),
      drop: async () => {
        const c = new pg.Client({ connectionString: TEST_PG_URL });
        await c.connect();
        await c.query(`drop schema if exists ${name} cascade`);
        await c.end();
      },
    };
  }
  const dir = join(tmpdir(), `svc-test-${name}`);
  return {
    url: `sqlite:${join(dir, 'svc.db')}`,
    drop: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface TestApp {
  app: FastifyInstance;
  ctx: AppContext;
  store: Store;
  config: Config;
  close(): Promise<void>;
  inject(opts: InjectOptions): Promise<LightMyRequestResponse>;
  token(userId: string): Promise<string>;
}

export async function createTestApp(
  overrides: Partial<Config> = {},
  options: {
    clock?: Clock;
    database?: TestDatabase;
    streams?: BuildOptions['streams'];
    dashboardDir?: string;
  } = {},
): Promise<TestApp> {
  const database = options.database ?? (await freshDatabase());
  const config: Config = {
    ...loadConfig({}),
    jwtSecret: JWT_SECRET,
    adminToken: ADMIN_TOKEN,
    databaseUrl: database.url,
    logLevel: 'silent',
    ...overrides,
  };
  const store = openStore(config.databaseUrl);
  await migrateToLatest(store);
  const { app, ctx } = await buildApp({
    config,
    store,
    logger: false,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.streams ? { streams: options.streams } : {}),
    ...(options.dashboardDir ? { dashboardDir: options.dashboardDir } : {}),
  });
  await app.ready();
  return {
    app,
    ctx,
    store,
    config,
    inject: (opts) => app.inject(opts),
    token: (userId) => signUserToken(JWT_SECRET, userId, 3600, config),
    async close() {
      await app.close();
      await store.close();
      if (!options.database) await database.drop();
    },
  };
}

export interface Tenant {
  userId: string;
  token: string;
  orgId: string;
  projectId: string;
  apiKey: string;
}

let seq = 0;

/** A user with an organization, a project and its first API key. */
export async function createTenant(
  t: TestApp,
  userId = `user-${++seq}-${randomBytes(3).toString('hex')}`,
): Promise<Tenant> {
  const token = await t.token(userId);
  const slug = `org-${randomBytes(5).toString('hex')}`;
  const org = await t.inject({
    method: 'POST',
    url: '/v1/organizations',
    headers: { authorization: `Bearer ${token}` },
    payload: { name: `Org ${slug}`, slug },
  });
  if (org.statusCode !== 201) throw new Error(`org create failed: ${org.body}`);
  const orgId = org.json()._id as string;
  const project = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: { authorization: `Bearer ${token}` },
    payload: { organizationId: orgId, name: 'Main' },
  });
  if (project.statusCode !== 201) throw new Error(`project create failed: ${project.body}`);
  return { userId, token, orgId, projectId: project.json()._id, apiKey: project.json().apiKey };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
export const keyHeader = (key: string) => ({ 'x-service-api-key': key });
export const asUser = (tenant: Tenant) => ({
  authorization: `Bearer ${tenant.token}`,
  'x-organization-id': tenant.orgId,
});

export function expectError(res: LightMyRequestResponse, status: number, code: string): void {
  const body = res.json() as { error?: { code?: string; message?: string } };
  if (res.statusCode !== status || body.error?.code !== code || typeof body.error?.message !== 'string') {
    throw new Error(`expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  }
}
