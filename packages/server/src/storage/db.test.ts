import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { freshDatabase, TEST_PG_URL } from '../../test/helpers.js';
import { openStore } from './db.js';

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
});
