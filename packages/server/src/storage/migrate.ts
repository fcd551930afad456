import {
  DEFAULT_MIGRATION_TABLE,
  type Dialect,
  Kysely,
  type Migration,
  type MigrationProvider,
  Migrator,
  SqliteAdapter,
  SqliteDialect,
  sql,
} from 'kysely';
import type { Store } from './db.js';
import * as m0001 from './migrations/0001_tenancy.js';
import * as m0002 from './migrations/0002_enforcement.js';
import * as m0003 from './migrations/0003_approvals_drafts.js';
import * as m0004 from './migrations/0004_mcp_upstreams.js';
import * as m0005 from './migrations/0005_approval_requester.js';
import * as m0006 from './migrations/0006_key_scopes.js';
import * as m0007 from './migrations/0007_decision_log_indexes.js';
import * as m0008 from './migrations/0008_spend_ledger.js';
import * as m0009 from './migrations/0009_charter.js';
import * as m0012 from './migrations/0012_checkpoints.js';
import * as m0013 from './migrations/0013_policy_versions.js';
import * as m0014 from './migrations/0014_dashboard_sessions.js';
import * as m0015 from './migrations/0015_gateway.js';
import * as m0017 from './migrations/0017_dual_control.js';
import * as m0018 from './migrations/0018_invoices_workflows_providers.js';
import * as m0019 from './migrations/0019_approval_escalation.js';
import * as m0022 from './migrations/0022_oidc_sign_in.js';
import * as m0023 from './migrations/0023_checkpoint_origin.js';
import * as m0024 from './migrations/0024_spend_receipt_claims.js';
import * as m0025 from './migrations/0025_owed_receipt_indexes.js';
import * as m0026 from './migrations/0026_idempotency_origin.js';
import * as m0027 from './migrations/0027_resolved_approvals_index.js';
import * as m0028 from './migrations/0028_key_lineage.js';
import * as m0029 from './migrations/0029_serve_owner.js';
import * as m0030 from './migrations/0030_key_creator.js';

/**
 * Migrations are listed in code (not read from a folder) so they run the same under tsx, a bundle
 * or tests. Names sort in application order; add new ones at the end.
 */
const MIGRATIONS: Record<string, Migration> = {
  '0001_tenancy': m0001,
  '0002_enforcement': m0002,
  '0003_approvals_drafts': m0003,
  '0004_mcp_upstreams': m0004,
  '0005_approval_requester': m0005,
  '0006_key_scopes': m0006,
  '0007_decision_log_indexes': m0007,
  '0008_spend_ledger': m0008,
  '0009_charter': m0009,
  '0012_checkpoints': m0012,
  '0013_policy_versions': m0013,
  '0014_dashboard_sessions': m0014,
  '0015_gateway': m0015,
  '0017_dual_control': m0017,
  '0018_invoices_workflows_providers': m0018,
  '0019_approval_escalation': m0019,
  '0022_oidc_sign_in': m0022,
  '0023_checkpoint_origin': m0023,
  '0024_spend_receipt_claims': m0024,
  '0025_owed_receipt_indexes': m0025,
  '0026_idempotency_origin': m0026,
  '0027_resolved_approvals_index': m0027,
  '0028_key_lineage': m0028,
  '0029_serve_owner': m0029,
  '0030_key_creator': m0030,
};

const provider: MigrationProvider = { getMigrations: async () => MIGRATIONS };

export async function migrateToLatest(store: Store): Promise<string[]> {
  // Kysely looks for its bookkeeping tables in every schema unless told which one: on a PostgreSQL
  // database where another schema already holds them, it would skip creating its own and fail.
  const schema =
    store.dialect === 'postgres'
      ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(store.db)).rows[0]?.schema
      : undefined;
  const migrator = new Migrator({
    db: store.dialect === 'sqlite' && store.sqlite ? transactionalSqlite(store) : store.db,
    provider,
    // Migrations that add independent tables may be numbered out of landing order; each runs once.
    allowUnorderedMigrations: true,
    ...(schema ? { migrationTableSchema: schema } : {}),
  });
  // On SQLite, under the store's own connection lock: the migrations run on the same handle.
  const { error, results } =
    store.dialect === 'sqlite'
      ? await store.db.connection().execute(() => migrator.migrateToLatest())
      : await migrator.migrateToLatest();
  if (error) {
    // Kysely's word for a store that holds a migration this version does not know: a newer svc ran.
    const unknown = /previously executed migration (\S+) is missing/.exec(String(error));
    if (unknown) {
      throw new Error(
        `the store was migrated by a newer version of svc (its migration ${unknown[1]} is unknown to this one): run that version or a newer one; do not edit the migrations table`,
      );
    }
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`migration ${failed?.migrationName ?? '(unknown)'} failed: ${String(error)}`);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** Kysely's SQLite adapter, but saying what SQLite can: DDL inside a transaction. */
class TransactionalDdlSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

/**
 * The store's SQLite handle, for the migrator, with the pending migrations in one transaction: one
 * that fails partway (a full disk, a crash) leaves nothing of itself behind, so the next start runs
 * it again from the beginning. Kysely's own SQLite adapter runs each statement on its own, and a
 * migration stopped halfway then failed for ever ("table … already exists"). Never destroyed: that
 * would close the store's handle.
 */
function transactionalSqlite(store: Store): Kysely<unknown> {
  const inner = new SqliteDialect({ database: store.sqlite! });
  const dialect: Dialect = {
    createAdapter: () => new TransactionalDdlSqliteAdapter(),
    createDriver: () => inner.createDriver(),
    createQueryCompiler: () => inner.createQueryCompiler(),
    createIntrospector: (db) => inner.createIntrospector(db),
  };
  return new Kysely<unknown>({ dialect });
}

/**
 * The store's migrations against those this version of svc knows, without running any: `applied`,
 * the names recorded where migrateToLatest records them (PostgreSQL: the current schema; none when
 * it never ran there), `unknown` (a newer svc ran), and `pending`, in application order.
 */
export async function migrationState(
  store: Store,
): Promise<{ applied: string[]; unknown: string[]; pending: string[] }> {
  const table = DEFAULT_MIGRATION_TABLE;
  const exists =
    store.dialect === 'postgres'
      ? sql<{ n: number }>`select count(*) as n from information_schema.tables
          where table_schema = current_schema() and table_name = ${table}`
      : sql<{ n: number }>`select count(*) as n from sqlite_master where type = 'table' and name = ${table}`;
  const applied =
    Number((await exists.execute(store.db)).rows[0]?.n) === 0
      ? []
      : (await sql<{ name: string }>`select name from ${sql.table(table)}`.execute(store.db)).rows.map(
          (r) => r.name,
        );
  const known = Object.keys(MIGRATIONS).sort();
  return {
    applied,
    unknown: applied.filter((name) => !Object.hasOwn(MIGRATIONS, name)).sort(),
    pending: known.filter((name) => !applied.includes(name)),
  };
}
