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

/** A promise opened by hand: a test holds something (a request, a write) on `opened` until `open()`. */
export function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((done) => {
    open = done;
  });
  return { opened, open };
}

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
  /** The database under the app; another app given it in `options.database` shares the store. */
  database: TestDatabase;
  /** The origin (`http://127.0.0.1:<port>`) of an app built with `listen: true`. */
  url: string;
  /** Stops the app, closes the store and drops the database it created; a second call does nothing. */
  close(): Promise<void>;
  inject(opts: InjectOptions): Promise<LightMyRequestResponse>;
  token(userId: string): Promise<string>;
}

export interface TestAppOptions {
  clock?: Clock;
  /** A database to use and leave in place (its owner drops it), e.g. another app's `database`. */
  database?: TestDatabase;
  streams?: BuildOptions['streams'];
  dashboardDir?: string;
  /** Listen on a free loopback port (for real HTTP clients); `url` is then the app's origin. */
  listen?: boolean;
}

/** Builds an app on a fresh (or the given) database, migrated, ready for `inject`. */
export async function createTestApp(
  overrides: Partial<Config> = {},
  options: TestAppOptions = {},
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
  const close = async () => {
    await store.close();
    if (!options.database) await database.drop();
  };
  let built: Awaited<ReturnType<typeof buildApp>>;
  try {
    await migrateToLatest(store);
    built = await buildApp({
      config,
      store,
      logger: false,
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.streams ? { streams: options.streams } : {}),
      ...(options.dashboardDir ? { dashboardDir: options.dashboardDir } : {}),
    });
  } catch (err) {
    // A configuration the app refuses must not leave the store open or the database behind.
    await close();
    throw err;
  }
  const { app, ctx } = built;
  let closing: Promise<void> | undefined;
  const shut = () => {
    closing ??= app.close().then(close);
    return closing;
  };
  let url: string | undefined;
  try {
    await app.ready();
    if (options.listen) url = await app.listen({ port: 0, host: '127.0.0.1' });
  } catch (err) {
    await shut();
    throw err;
  }
  return {
    app,
    ctx,
    store,
    config,
    database,
    get url(): string {
      if (url === undefined) throw new Error('this test app does not listen: build it with { listen: true }');
      return url;
    },
    inject: (opts) => app.inject(opts),
    token: (userId) => signUserToken(JWT_SECRET, userId, 3600, config),
    close: shut,
  };
}

/** An app of one test's own (e.g. with another configuration), torn down when `run` settles. */
export function withTestApp<T>(overrides: Partial<Config>, run: (t: TestApp) => Promise<T>): Promise<T>;
export function withTestApp<T>(
  overrides: Partial<Config>,
  options: TestAppOptions,
  run: (t: TestApp) => Promise<T>,
): Promise<T>;
export async function withTestApp<T>(
  overrides: Partial<Config>,
  ...rest: [(t: TestApp) => Promise<T>] | [TestAppOptions, (t: TestApp) => Promise<T>]
): Promise<T> {
  const [options, run] = rest.length === 1 ? [{}, rest[0]] : rest;
  const t = await createTestApp(overrides, options);
  try {
    return await run(t);
  } finally {
    await t.close();
  }
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
