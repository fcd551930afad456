import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import { freshDatabase, TEST_PG_URL, type TestDatabase } from '../../test/helpers.js';
import { PausingProxy, timed } from '../../test/pausing-proxy.js';
import { closedPort } from '../../test/ports.js';
import {
  checkFreeSpace,
  isStoreOutage,
  isStoreUnavailable,
  MIN_FREE_BYTES,
  openStore,
  type PostgresTimeouts,
  probeSqliteWritable,
  type Store,
  StoreNotFoundError,
  StoreUnavailableError,
} from './db.js';

describe('the SQLite store', () => {
  const dirs: string[] = [];
  const tempDir = () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-db-test-'));
    dirs.push(dir);
    return dir;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) {
      chmodSync(d, 0o700);
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('finds a connection that cannot write, and leaves a writable one unchanged', () => {
    const path = join(tempDir(), 'svc.db');
    const store = openStore(`sqlite:${path}`);
    const version = store.sqlite!.pragma('user_version', { simple: true });
    expect(() => probeSqliteWritable(store.sqlite!)).not.toThrow();
    expect(store.sqlite!.pragma('user_version', { simple: true })).toBe(version);
    expect(store.sqlite!.inTransaction).toBe(false);
    // The file opened read-only, as it is for a process that may not write it (root may write any).
    const readOnly = new SQLite(path, { readonly: true });
    try {
      expect(() => probeSqliteWritable(readOnly)).toThrow(
        expect.objectContaining({ code: expect.stringMatching(/^SQLITE_READONLY/) }),
      );
      expect(readOnly.inTransaction).toBe(false);
    } finally {
      readOnly.close();
      void store.close();
    }
  });

  it('is ready while another connection holds the write lock: the check never waits for it', async () => {
    const path = join(tempDir(), 'svc.db');
    const store = openStore(`sqlite:${path}`);
    const other = new SQLite(path);
    try {
      other.exec('BEGIN IMMEDIATE');
      const { ms, error } = await timed(() => store.ping());
      expect(error).toBeUndefined();
      // The connection's busy timeout is 5 s: the check did not wait for the lock.
      expect(ms).toBeLessThan(1000);
      other.exec('ROLLBACK');
      // The connection's own busy timeout is back: a write still waits for a lock.
      expect(store.sqlite!.pragma('busy_timeout', { simple: true })).toBe(5000);
    } finally {
      other.close();
      await store.close();
    }
  });

  it('names the file it cannot open, and where its name comes from', () => {
    const dir = tempDir();
    // A folder where the file should be.
    expect(() => openStore(`sqlite:${dir}`)).toThrow(
      `cannot open the SQLite database at ${dir} (SVC_DATABASE_URL): unable to open database file`,
    );
    // A folder that cannot be created (its parent is a file).
    const file = join(dir, 'file');
    openStore(`sqlite:${file}`).close();
    expect(() => openStore(`sqlite:${join(file, 'sub', 'svc.db')}`)).toThrow(
      new RegExp(
        `^cannot create the folder of the SQLite database at ${join(file, 'sub', 'svc.db')} \\(SVC_DATABASE_URL\\): `,
      ),
    );
  });

  it('opens only a file that exists when told to, creating and changing nothing', async () => {
    const dir = tempDir();
    const missing = join(dir, 'sub', 'svc.db');
    let error: unknown;
    try {
      openStore(`sqlite:${missing}`, { existing: true });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(StoreNotFoundError);
    expect(error).toMatchObject({
      path: missing,
      message: `there is no SQLite database at ${missing} (SVC_DATABASE_URL)`,
    });
    // Not even the folder.
    expect(readdirSync(dir)).toEqual([]);

    // A file that is there opens as it is: an empty one stays empty (its journal mode unchanged).
    const empty = join(dir, 'empty.db');
    writeFileSync(empty, '');
    const opened = openStore(`sqlite:${empty}`, { existing: true });
    expect(opened.sqlitePath).toBe(empty);
    await opened.ping();
    await opened.close();
    expect(statSync(empty).size).toBe(0);
    expect(readdirSync(dir)).toEqual(['empty.db']);

    // A store keeps its WAL mode; without the option a missing one is created, folder included.
    const created = openStore(`sqlite:${missing}`);
    await created.close();
    const store = openStore(`sqlite:${missing}`, { existing: true });
    try {
      expect(store.sqlite!.pragma('journal_mode', { simple: true })).toBe('wal');
    } finally {
      await store.close();
    }
  });

  // Root writes any file whatever its mode: the check runs `svc migrate` as another user.
  const canDropPrivileges =
    process.getuid?.() === 0 && existsSync('/usr/bin/setpriv') && process.platform === 'linux';
  it.runIf(canDropPrivileges)(
    'refuses to start on a file the user may not write, with a clear message',
    () => {
      const dir = tempDir();
      chmodSync(dir, 0o777);
      const path = join(dir, 'svc.db');
      openStore(`sqlite:${path}`).close();
      chmodSync(path, 0o444);
      const run = spawnSync(
        'setpriv',
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          process.execPath,
          ...SVC_FLAGS,
          SVC_BIN,
          'migrate',
        ],
        {
          env: { PATH: process.env.PATH, HOME: dir, SVC_DATABASE_URL: `sqlite:${path}` },
          encoding: 'utf8',
          timeout: 25_000,
        },
      );
      expect(run.stderr).toContain(
        `svc: cannot write to the SQLite database at ${path} (SVC_DATABASE_URL): attempt to write a readonly database; make the file and its folder writable by the user running svc (user id 65534)`,
      );
      expect(run.status).toBe(1);
    },
  );
});

describe('isStoreUnavailable', () => {
  it('counts the server giving up on a statement or a session as the store away, never a wrong statement', () => {
    const pgError = (code: string) => Object.assign(new Error(`pg ${code}`), { code });
    for (const code of ['57014', '25P03', '57P01', '57P02', '57P03', '08006', '08001']) {
      expect([code, isStoreUnavailable(pgError(code))]).toEqual([code, true]);
    }
    expect(isStoreUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isStoreUnavailable(new StoreUnavailableError('did not answer'))).toBe(true);
    for (const code of ['23505', '42P01', '22P02', 'SQLITE_BUSY', 'SQLITE_CONSTRAINT']) {
      expect([code, isStoreUnavailable(pgError(code))]).toEqual([code, false]);
    }
    expect(isStoreUnavailable(new Error('syntax error'))).toBe(false);
    expect(isStoreUnavailable(null)).toBe(false);
  });

  it('answers a SQLite file that cannot be written as an outage, but leaves no outcome unknown', () => {
    const err = (code: string) => Object.assign(new Error(code), { code });
    for (const code of [
      'SQLITE_FULL',
      'SQLITE_IOERR',
      'SQLITE_IOERR_FSYNC',
      'SQLITE_BUSY_SNAPSHOT',
      'SQLITE_READONLY',
    ]) {
      expect([code, isStoreOutage(err(code)), isStoreUnavailable(err(code))]).toEqual([code, true, false]);
    }
    for (const code of ['SQLITE_CONSTRAINT_UNIQUE', 'SQLITE_ERROR', 'SQLITE_FULLX', '23505']) {
      expect([code, isStoreOutage(err(code))]).toEqual([code, false]);
    }
    expect(isStoreOutage(new StoreUnavailableError('did not answer'))).toBe(true);
  });
});

describe('PostgreSQL connection errors', () => {
  it('name the database at SVC_DATABASE_URL, never its password', async () => {
    const port = await closedPort();
    const store = openStore(`postgres://svc:hunter2@127.0.0.1:${port}/svc?password=hunter3`);
    try {
      const { error } = await timed(() => store.ping());
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(isStoreUnavailable(error)).toBe(true);
      const message = (error as Error).message;
      expect(message).toBe(
        `cannot connect to the database at SVC_DATABASE_URL (postgres://svc@127.0.0.1:${port}/svc): connect ECONNREFUSED 127.0.0.1:${port}`,
      );
      expect((error as { code?: string }).code).toBe('ECONNREFUSED');
    } finally {
      await store.close();
    }
  });

  it('come within the connect timeout from a server that accepts and never answers', async () => {
    // Accepts connections and never answers (as a server behind a partition would).
    const silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const proxy = await PausingProxy.start((silent.address() as { port: number }).port, { paused: true });
    const store = openStore(proxy.url('postgres://svc:hunter2@localhost:5432/svc'), {
      purpose: 'serve',
      timeouts: { connectMs: 300 },
    });
    try {
      const { ms, error } = await timed(() => store.ping());
      expect((error as Error).message).toMatch(
        new RegExp(
          `^cannot connect to the database at SVC_DATABASE_URL \\(postgres://svc@127\\.0\\.0\\.1:${proxy.port}/svc\\): no connection within 300 ms`,
        ),
      );
      expect((error as Error).message).not.toContain('hunter2');
      expect(ms).toBeLessThan(3000);
      expect((await timed(() => store.close())).error).toBeUndefined();
    } finally {
      await proxy.close();
      silent.close();
    }
  });
});

describe.runIf(TEST_PG_URL)('the PostgreSQL store', () => {
  it('survives a connection killed while checked out: the query fails, the process and the pool go on', async () => {
    const database = await freshDatabase();
    const store = openStore(database.url);
    const admin = new pg.Client({ connectionString: TEST_PG_URL! });
    await admin.connect();
    try {
      const failed = await store.db
        .transaction()
        .execute(async (trx) => {
          const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
          // The server ends this transaction's connection while it is checked out (a failover, an
          // administrator): the client emits 'error' with no query running.
          await admin.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
          await new Promise((r) => setTimeout(r, 200));
          await sql`select 1`.execute(trx);
        })
        .then(
          () => null,
          (err: unknown) => err,
        );
      expect(failed).toBeInstanceOf(Error);
      // The broken connection left the pool: the next queries get working ones.
      for (let i = 0; i < 3; i++) await store.ping();
    } finally {
      await admin.end();
      await store.close();
      await database.drop();
    }
  });

  describe('while the network to the server is cut', () => {
    let database: TestDatabase | null = null;
    let proxy: PausingProxy | null = null;
    let store: Store | null = null;
    afterEach(async () => {
      proxy?.resume();
      await store?.close();
      await proxy?.close();
      await database?.drop();
      database = proxy = store = null;
    });
    const open = async (timeouts: Partial<PostgresTimeouts>, purpose: 'serve' | 'command' = 'serve') => {
      database = await freshDatabase();
      proxy = await PausingProxy.start(Number(new URL(TEST_PG_URL!).port || 5432));
      store = openStore(proxy.url(database.url), { timeouts, purpose });
      await store.ping();
      return { store, proxy };
    };

    it('fails a statement within the query timeout, drops its connection, and recovers after', async () => {
      const { store, proxy } = await open({ queryMs: 300 });
      proxy.pause();
      const { ms, error } = await timed(() => store.ping());
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toMatch(
        /^the database at SVC_DATABASE_URL \(postgres:\/\/postgres@127\.0\.0\.1:\d+\/test\) did not answer within 300 ms; the connection was closed$/,
      );
      expect(ms).toBeLessThan(3000);
      proxy.resume();
      // The connection that timed out is gone (its state is unknown); a new one answers.
      for (let i = 0; i < 3; i++) await store.ping();
    });

    it('fails a transaction as a whole with the timeout, its rollback included', async () => {
      const { store, proxy } = await open({ queryMs: 300 });
      const { error } = await timed(() =>
        store.db.transaction().execute(async (trx) => {
          await sql`select 1`.execute(trx);
          proxy.pause();
          await sql`select 2`.execute(trx);
        }),
      );
      // The timeout itself, not the rollback's failure on the connection it closed.
      expect((error as Error).message).toMatch(/did not answer within 300 ms/);
      proxy.resume();
      await store.ping();
    });

    it('waits at most the connect timeout for a connection', async () => {
      const { store, proxy } = await open({ queryMs: 60_000, connectMs: 300, statementMs: 0 });
      proxy.pause();
      // The pooled connection is taken by a statement that never gets its answer…
      const stuck = store.ping().catch(() => {});
      // …and each of the pool's other slots is taken by a connection that never gets set up.
      const { ms, error } = await timed(() =>
        Promise.all(Array.from({ length: 10 }, () => sql`select 1`.execute(store.db))),
      );
      expect((error as Error).message).toMatch(
        /^cannot connect to the database at SVC_DATABASE_URL .*no connection within 300 ms/,
      );
      expect(ms).toBeLessThan(3000);
      proxy.resume();
      await stuck;
    });

    it('closes within its close timeout, cutting the connections the server does not end', async () => {
      // No statement bound (as when migrating): a statement in flight would hold close() forever.
      const { store, proxy } = await open({ closeMs: 300 }, 'command');
      proxy.pause();
      const inFlight = timed(() => store.ping());
      await new Promise((r) => setTimeout(r, 50));
      const { ms, error } = await timed(() => store.close());
      expect(error).toBeUndefined();
      expect(ms).toBeLessThan(3000);
      // The statement failed with its connection, instead of waiting for the server.
      expect((await inFlight).error).toBeInstanceOf(Error);
    });
  });

  it('bounds statements on the server when serving, not when migrating', async () => {
    const database = await freshDatabase();
    const serve = openStore(database.url, { purpose: 'serve' });
    const migrate = openStore(database.url);
    const fromUrl = new URL(database.url);
    fromUrl.searchParams.set('statement_timeout', '150');
    const tuned = openStore(fromUrl.toString(), { purpose: 'serve' });
    const tunedMigrate = openStore(fromUrl.toString());
    const setting = async (s: Store, name: string) =>
      (await sql<{ v: string }>`select current_setting(${name}) as v`.execute(s.db)).rows[0]!.v;
    try {
      expect(await setting(serve, 'statement_timeout')).toBe('5s');
      expect(await setting(serve, 'idle_in_transaction_session_timeout')).toBe('10s');
      expect(await setting(migrate, 'statement_timeout')).toBe('0');
      expect(await setting(tuned, 'statement_timeout')).toBe('150ms');
      // The operator's bound is for serving: migrations still run unbounded.
      expect(await setting(tunedMigrate, 'statement_timeout')).toBe('0');
      // The server cancels a statement past the bound, and the connection stays usable.
      const { ms, error } = await timed(() => sql`select pg_sleep(2)`.execute(tuned.db));
      expect((error as { code?: string }).code).toBe('57014');
      expect(ms).toBeLessThan(1500);
      await tuned.ping();
    } finally {
      await Promise.all([serve.close(), migrate.close(), tuned.close(), tunedMigrate.close()]);
      await database.drop();
    }
  });
});

describe('checkFreeSpace (GET /readyz on the embedded store)', () => {
  const disk = (bavail: number, bsize = 4096) => (() => ({ bavail, bsize })) as never;
  it('counts a disk with less than 1 MiB free as the store away, naming the file', () => {
    expect(() => checkFreeSpace('/data/svc.db', disk(255))).toThrow(StoreUnavailableError);
    expect(() => checkFreeSpace('/data/svc.db', disk(0))).toThrow(
      'the disk holding the SQLite database /data/svc.db has 0 bytes free (at least 1048576 needed)',
    );
    expect(() => checkFreeSpace('/data/svc.db', disk(256))).not.toThrow();
    expect(MIN_FREE_BYTES).toBe(1024 * 1024);
  });

  it('reads the real disk of a store', () => {
    expect(() => checkFreeSpace(join(tmpdir(), 'svc.db'))).not.toThrow();
  });
});
