import { existsSync, mkdirSync, statfsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import { settlesWithin } from '../lib/deadline.js';
import { isSqliteBusy } from './errors.js';
import type { Database } from './schema.js';

export type DialectName = 'sqlite' | 'postgres';

/** What a repository method runs on: the database, or the caller's open transaction. */
export type Db = Kysely<Database> | Transaction<Database>;

export interface Store {
  db: Kysely<Database>;
  dialect: DialectName;
  /** Absolute path of the embedded database file, or null on PostgreSQL. */
  sqlitePath: string | null;
  /**
   * The embedded database's own handle, for hot paths that run prepared statements synchronously.
   * Use it only inside `db.connection().execute(...)`, which holds Kysely's connection lock, so it can
   * never interleave with a Kysely transaction.
   */
  sqlite: SQLite.Database | null;
  ping(): Promise<void>;
  close(): Promise<void>;
}

// int8 (COUNT, SUM, BIGINT columns) as JS numbers: every value we store fits in 2^53.
pg.types.setTypeParser(20, (v) => Number(v));
// numeric as number as well (SUM over integer columns yields numeric).
pg.types.setTypeParser(1700, (v) => Number(v));

/** How long a connection to the embedded database waits for another's write lock (busy_timeout). */
const SQLITE_BUSY_TIMEOUT_MS = 5000;

/**
 * A connection to the embedded database with the settings every connection to it uses. It waits up
 * to `busyTimeoutMs` for another connection's lock, from its first statement on (0: it never waits;
 * a statement that would fails at once with SQLITE_BUSY). With `existing`, a missing file is an error
 * (SQLITE_CANTOPEN) instead of a new, empty database, and the file keeps its journal mode: one that is
 * not a store (an empty file, another program's database) is left as it was, and a store is in WAL
 * mode already (every other connection sets it, and the file keeps it).
 */
export function openSqliteHandle(
  path: string,
  busyTimeoutMs = SQLITE_BUSY_TIMEOUT_MS,
  existing = false,
): SQLite.Database {
  const handle = new SQLite(path, { timeout: busyTimeoutMs, fileMustExist: existing });
  try {
    // Durable before answered: WAL with synchronous=FULL fsyncs every commit.
    if (!existing) handle.pragma('journal_mode = WAL');
    handle.pragma('synchronous = FULL');
    handle.pragma('foreign_keys = ON');
  } catch (err) {
    handle.close();
    throw err;
  }
  return handle;
}

/**
 * Fails unless the connection can write to its database: a write transaction that changes nothing
 * (user_version set to its own value) and is rolled back. A file the process cannot write (its mode,
 * its owner, a read-only mount) opens without complaint and reads fine; every write then fails. With
 * `busyTimeoutMs` 0, a write lock held by another connection answers at once, and counts as
 * writable (someone is writing).
 */
export function probeSqliteWritable(handle: SQLite.Database, busyTimeoutMs?: number): void {
  const previous = busyTimeoutMs === undefined ? undefined : handle.pragma('busy_timeout', { simple: true });
  if (busyTimeoutMs !== undefined) handle.pragma(`busy_timeout = ${busyTimeoutMs}`);
  try {
    handle.exec('BEGIN IMMEDIATE');
    try {
      const version = Number(handle.pragma('user_version', { simple: true }));
      handle.pragma(`user_version = ${version}`);
    } finally {
      handle.exec('ROLLBACK');
    }
  } catch (err) {
    if (busyTimeoutMs !== undefined && isSqliteBusy(err)) return;
    throw err;
  } finally {
    if (previous !== undefined) handle.pragma(`busy_timeout = ${Number(previous)}`);
  }
}

/** Free space below which a SQLite store counts as not ready: a few batches' WAL frames. */
export const MIN_FREE_BYTES = 1024 * 1024;

/** Throws StoreUnavailableError when the disk holding `file` has less than MIN_FREE_BYTES free. */
export function checkFreeSpace(file: string, statfs: typeof statfsSync = statfsSync): void {
  const { bavail, bsize } = statfs(dirname(file));
  const free = Number(bavail) * Number(bsize);
  if (free < MIN_FREE_BYTES) {
    throw new StoreUnavailableError(
      `the disk holding the SQLite database ${file} has ${free} bytes free (at least ${MIN_FREE_BYTES} needed)`,
    );
  }
}

function isSqliteReadOnly(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_READONLY');
}

/** The embedded database's error, naming the file and where it comes from. */
function sqliteError(what: string, path: string, err: unknown, hint = ''): Error {
  const e = err as { message?: string; code?: string };
  const why = e?.message ?? String(err);
  const out = new Error(`${what} at ${path} (SVC_DATABASE_URL): ${why}${hint ? `; ${hint}` : ''}`, {
    cause: err,
  });
  if (e?.code) Object.assign(out, { code: e.code });
  return out;
}

/** `openStore(url, { existing: true })` found no database file at `path` and created none. */
export class StoreNotFoundError extends Error {
  override name = 'StoreNotFoundError';
  constructor(readonly path: string) {
    super(`there is no SQLite database at ${path} (SVC_DATABASE_URL)`);
  }
}

function openSqlite(url: string, existing: boolean): Store {
  const path = url.slice('sqlite:'.length);
  const inMemory = path === ':memory:' || path === '';
  const absolute = inMemory ? null : resolve(path);
  // Checked first for a clear error; the open itself then refuses to create the file, so one removed
  // in between is an error too, never a new database.
  if (absolute && existing && !existsSync(absolute)) throw new StoreNotFoundError(absolute);
  if (absolute && !existing) {
    try {
      mkdirSync(dirname(absolute), { recursive: true });
    } catch (err) {
      throw sqliteError('cannot create the folder of the SQLite database', absolute, err);
    }
  }
  const where = absolute ?? ':memory:';
  const readOnly = (err: unknown) => {
    const who = typeof process.getuid === 'function' ? ` (user id ${process.getuid()})` : '';
    return sqliteError(
      'cannot write to the SQLite database',
      where,
      err,
      `make the file and its folder writable by the user running svc${who}`,
    );
  };
  let handle: SQLite.Database;
  try {
    handle = openSqliteHandle(where, SQLITE_BUSY_TIMEOUT_MS, existing && absolute !== null);
  } catch (err) {
    // Switching a read-only file to WAL fails already.
    if (isSqliteReadOnly(err)) throw readOnly(err);
    throw sqliteError('cannot open the SQLite database', where, err);
  }
  if (absolute) {
    try {
      // At start, not at the first write: a store it cannot write to must not serve (and be ready).
      probeSqliteWritable(handle);
    } catch (err) {
      // Another connection kept the write lock for the whole busy timeout: it can write, so can we.
      if (!isSqliteBusy(err)) {
        handle.close();
        throw isSqliteReadOnly(err)
          ? readOnly(err)
          : sqliteError('cannot use the SQLite database', where, err);
      }
    }
  }
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: handle }) });
  return {
    db,
    dialect: 'sqlite',
    sqlitePath: absolute,
    sqlite: handle,
    ping: async () => {
      // Under Kysely's connection lock: never inside another caller's transaction on this handle.
      await db.connection().execute(async () => {
        handle.prepare('select 1').get();
        // A file that became read-only (its mode, a remount) fails here instead of on the next write.
        if (absolute) probeSqliteWritable(handle, 0);
      });
      // The probe writes nothing to disk: a full disk shows only in its free space.
      if (absolute) checkFreeSpace(absolute);
    },
    close: async () => {
      await db.destroy();
    },
  };
}

/** How a PostgreSQL store bounds waiting on the server. 0 leaves a bound off. */
export interface PostgresTimeouts {
  /** Opening a connection (TCP, TLS, authentication), or waiting for a free one in the pool. */
  connectMs: number;
  /**
   * `statement_timeout`, sent when connecting: the server cancels a statement (lock waits included)
   * that runs longer, and rolls its transaction back. A `statement_timeout` in SVC_DATABASE_URL wins.
   */
  statementMs: number;
  /**
   * How long the client waits for the answer to a statement before it gives the connection up (a
   * partition: the server never answers, or its answer never arrives). The connection is closed,
   * never reused: the statement may still complete on the server. Set just above `statementMs`, so
   * that a server that answers cancels the statement itself, cleanly.
   */
  queryMs: number;
  /**
   * `idle_in_transaction_session_timeout`: the server ends a session that stays idle inside a
   * transaction this long, releasing its row locks (a client that vanished mid-transaction).
   */
  idleInTransactionMs: number;
  /** TCP keepalive on every connection, first probe after this much idle time. */
  keepAliveMs: number;
  /** close() waits this long for connections to end, then destroys what is left (a server away). */
  closeMs: number;
}

/** Extra time the client gives the server's own cancellation (statement_timeout) to arrive. */
const QUERY_GRACE_MS = 1000;

/**
 * Serving: validations, the API, the dashboard. Every statement of the service is short (the receipt
 * export reads pages of 1,000 receipts, one statement each, so an export of any length is never cut
 * off); 5 s is far above any of them on a healthy server and lets a validation fail closed (503) well
 * within a client's 10 s timeout (the SDK's default) while the database is unreachable.
 */
export const SERVE_TIMEOUTS: PostgresTimeouts = {
  connectMs: 5000,
  statementMs: 5000,
  queryMs: 5000 + QUERY_GRACE_MS,
  idleInTransactionMs: 10_000,
  keepAliveMs: 10_000,
  closeMs: 2000,
};

/**
 * One-shot commands and migrations (`svc migrate`, `svc keys`, the migrations `svc serve` runs before
 * serving): an index built on a large table, or the wait for the migration lock another instance
 * holds while it migrates, may take minutes. No statement bound, on either side; connecting stays
 * bounded, and TCP keepalive notices a server that went away.
 */
export const COMMAND_TIMEOUTS: PostgresTimeouts = {
  connectMs: 5000,
  statementMs: 0,
  queryMs: 0,
  idleInTransactionMs: 0,
  keepAliveMs: 10_000,
  closeMs: 2000,
};

export interface StoreOptions {
  /**
   * PostgreSQL only: `serve` for the serving process (SERVE_TIMEOUTS: every statement bounded), or
   * `command` (the default: COMMAND_TIMEOUTS, statements unbounded) for migrations and one-shot
   * commands.
   */
  purpose?: 'serve' | 'command';
  /** PostgreSQL only: overrides of the purpose's timeouts (tests). */
  timeouts?: Partial<PostgresTimeouts>;
  /**
   * SQLite only: open the database file only if it exists (else StoreNotFoundError), creating
   * nothing, not even its folder, and leaving its journal mode as it is. For commands that work on the
   * server's store: a store they would create is not the one the server uses. Without it the file and
   * its folder are created, in WAL mode.
   */
  existing?: boolean;
}

/** The store did not answer in time, or could not be reached: retry later (HTTP 503 where mapped). */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError';
}

/**
 * PostgreSQL's codes for a statement the server gave up on or a session it ended, not a wrong
 * statement: 57014 query_canceled (statement_timeout), 25P03 idle_in_transaction_session_timeout,
 * 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now) and class 08 (connection
 * exceptions).
 */
const UNAVAILABLE_CODES = /^(57014|25P03|57P0[123]|08[0-9A-Z]{3})$/;

/**
 * True for an error that says the store is unreachable or too slow, not that the statement is
 * wrong: the client's own deadlines (StoreUnavailableError), the server's cancellations and ended
 * sessions, and a connection pg saw end under a query.
 */
export function isStoreUnavailable(err: unknown): boolean {
  if (err instanceof StoreUnavailableError) return true;
  const e = err as { code?: unknown; message?: unknown } | null;
  if (typeof e?.code === 'string' && UNAVAILABLE_CODES.test(e.code)) return true;
  return typeof e?.message === 'string' && /^Connection terminated/.test(e.message);
}

/**
 * SQLite's codes for a file that cannot be written now, not a wrong statement: a full disk, an I/O
 * error, the write lock held by another process past the busy timeout, a file made read-only or gone.
 */
const SQLITE_UNAVAILABLE = /^SQLITE_(?:FULL|IOERR|BUSY|READONLY|CANTOPEN)(?:_|$)/;

/**
 * What a client is answered 503 for: the store unreachable or too slow (isStoreUnavailable), or a
 * SQLite file that cannot be written now. Only answers use the latter: what isStoreUnavailable
 * decides besides (a batch failed as a whole, an idempotency key kept for a commit that may yet
 * land) is about a server that may still commit, which a SQLite error on this process's own
 * connection is not.
 */
export function isStoreOutage(err: unknown): boolean {
  if (isStoreUnavailable(err)) return true;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SQLITE_UNAVAILABLE.test(code);
}

/** The URL without what must not be printed (the password, the query string, which may hold one). */
export function describeDatabaseUrl(url: string): string {
  try {
    const u = new URL(url);
    const user = u.username ? `${u.username}@` : '';
    return `${u.protocol}//${user}${u.host}${u.pathname}`;
  } catch {
    return `${url.split(':')[0]}://…`;
  }
}

/** The `statement_timeout` query parameter of the URL, in ms, or null. */
function urlStatementTimeout(url: string): number | null {
  try {
    const v = new URL(url).searchParams.get('statement_timeout');
    if (v === null || !/^\d+$/.test(v.trim())) return null;
    return Number(v);
  } catch {
    return null;
  }
}

/**
 * A pg client whose statements wait at most `queryMs` for their answer. Past it the statement fails
 * with StoreUnavailableError and the connection is destroyed: its state is unknown (the server may
 * still be running the statement, or have committed it), so the pool drops it. A transaction on it
 * then fails as a whole, its ROLLBACK included, with the same error.
 */
function clientWithDeadline(queryMs: number, target: string): new () => pg.Client {
  class DeadlineClient extends pg.Client {
    expired: StoreUnavailableError | null = null;
  }
  const query = pg.Client.prototype.query;
  DeadlineClient.prototype.query = function (this: DeadlineClient, ...args: unknown[]) {
    if (this.expired) return Promise.reject(this.expired);
    const result = (query as (...a: unknown[]) => unknown).apply(this, args);
    if (!(result instanceof Promise)) return result;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.expired = new StoreUnavailableError(
          `the database at SVC_DATABASE_URL (${target}) did not answer within ${queryMs} ms; the connection was closed`,
        );
        reject(this.expired);
        (this as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      }, queryMs);
      result.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  } as typeof query;
  return DeadlineClient as unknown as new () => pg.Client;
}

function openPostgres(url: string, options: StoreOptions): Store {
  const serving = options.purpose === 'serve';
  const fromUrl = urlStatementTimeout(url);
  const timeouts: PostgresTimeouts = {
    ...(serving ? SERVE_TIMEOUTS : COMMAND_TIMEOUTS),
    // An operator's statement_timeout (in the URL, which pg sends instead of ours) moves the
    // client's own bound with it.
    ...(fromUrl !== null && serving
      ? { statementMs: fromUrl, queryMs: fromUrl > 0 ? fromUrl + QUERY_GRACE_MS : 0 }
      : {}),
    ...options.timeouts,
  };
  const target = describeDatabaseUrl(url);
  let connectionString = url;
  if (fromUrl !== null && !serving) {
    // The operator's bound is for serving: migrations and commands run unbounded.
    const u = new URL(url);
    u.searchParams.delete('statement_timeout');
    connectionString = u.toString();
  }
  const pool = new pg.Pool({
    connectionString,
    max: 10,
    connectionTimeoutMillis: timeouts.connectMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: timeouts.keepAliveMs,
    ...(timeouts.statementMs > 0 ? { statement_timeout: timeouts.statementMs } : {}),
    ...(timeouts.idleInTransactionMs > 0
      ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionMs }
      : {}),
    ...(timeouts.queryMs > 0 ? { Client: clientWithDeadline(timeouts.queryMs, target) } : {}),
  });
  // Every connection of the pool, so close() can cut off those a server away never lets end.
  const clients = new Set<pg.PoolClient>();
  // A connection the server ends (a failover, pg_terminate_backend, a restart) emits 'error'. The
  // pool listens only while the connection is idle in it; one checked out (a transaction waiting
  // on the application) had no listener, so the event crashed the process. Every connection
  // listens from the start: the query in flight fails on its own (its caller answers 503) and the
  // pool drops the broken connection when it is released.
  pool.on('connect', (client) => {
    clients.add(client);
    client.on('error', () => {});
  });
  pool.on('remove', (client) => clients.delete(client));
  pool.on('error', () => {});
  const dialectPool = {
    connect: async () => {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        throw connectError(err, target, timeouts.connectMs);
      }
      // A connection whose statement timed out goes back with that error: the pool destroys it
      // instead of handing it out again (its socket may not have closed yet).
      const release = client.release;
      client.release = (err?: Error | boolean) =>
        release.call(client, err || (client as { expired?: Error | null }).expired || undefined);
      return client;
    },
    end: () => pool.end(),
  };
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: dialectPool }) });
  return {
    db,
    dialect: 'postgres',
    sqlitePath: null,
    sqlite: null,
    ping: async () => {
      await sql`select 1`.execute(db);
    },
    close: async () => {
      const ended = db.destroy();
      if (!(await settlesWithin(ended, timeouts.closeMs))) {
        // Ending a connection waits for the server to close its side, which a server away never
        // does: cut the sockets instead.
        for (const c of clients) {
          (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
        }
        await ended;
      }
    },
  };
}

/** A failure to get a connection, naming the database (never its password) and the bound. */
function connectError(err: unknown, target: string, connectMs: number): StoreUnavailableError {
  const e = err as { message?: string; code?: string };
  const message = e?.message ?? String(err);
  // The cause (pg's own words) stays attached for the logs. These are pg's and its pool's words for
  // their connect timeout; a server's error naming a *_timeout setting is no such timeout.
  const why = /^timeout (expired|exceeded when trying to connect)$|connection timeout/i.test(message)
    ? `no connection within ${connectMs} ms`
    : message;
  const out = new StoreUnavailableError(
    `cannot connect to the database at SVC_DATABASE_URL (${target}): ${why}`,
    { cause: err },
  );
  if (e?.code) Object.assign(out, { code: e.code });
  return out;
}

export function openStore(url: string, options: StoreOptions = {}): Store {
  if (url.startsWith('sqlite:')) return openSqlite(url, options.existing === true);
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url, options);
  throw new Error('database URL must start with sqlite: or postgres://');
}
