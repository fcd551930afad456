import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
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
 * a statement that would fails at once with SQLITE_BUSY).
 */
export function openSqliteHandle(path: string, busyTimeoutMs = SQLITE_BUSY_TIMEOUT_MS): SQLite.Database {
  const handle = new SQLite(path, { timeout: busyTimeoutMs });
  try {
    // Durable before answered: WAL with synchronous=FULL fsyncs every commit.
    handle.pragma('journal_mode = WAL');
    handle.pragma('synchronous = FULL');
    handle.pragma('foreign_keys = ON');
  } catch (err) {
    handle.close();
    throw err;
  }
  return handle;
}

function openSqlite(url: string): Store {
  const path = url.slice('sqlite:'.length);
  const inMemory = path === ':memory:' || path === '';
  const absolute = inMemory ? null : resolve(path);
  if (absolute) mkdirSync(dirname(absolute), { recursive: true });
  const handle = openSqliteHandle(absolute ?? ':memory:');
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: handle }) });
  return {
    db,
    dialect: 'sqlite',
    sqlitePath: absolute,
    sqlite: handle,
    ping: async () => {
      handle.prepare('select 1').get();
    },
    close: async () => {
      await db.destroy();
    },
  };
}

function openPostgres(url: string): Store {
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  // A connection the server ends (a failover, pg_terminate_backend, a restart) emits 'error'. The
  // pool listens only while the connection is idle in it; one checked out (a transaction waiting
  // on the application) had no listener, so the event crashed the process. Every connection
  // listens from the start: the query in flight fails on its own (its caller answers 503) and the
  // pool drops the broken connection when it is released.
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
  pool.on('error', () => {});
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    db,
    dialect: 'postgres',
    sqlitePath: null,
    sqlite: null,
    ping: async () => {
      await sql`select 1`.execute(db);
    },
    close: async () => {
      await db.destroy();
    },
  };
}

export function openStore(url: string): Store {
  if (url.startsWith('sqlite:')) return openSqlite(url);
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url);
  throw new Error('database URL must start with sqlite: or postgres://');
}
