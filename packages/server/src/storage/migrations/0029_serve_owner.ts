import type { Kysely } from 'kysely';

/**
 * The process serving an embedded store (storage/owner.ts): at most one row, written by `svc serve`
 * when it starts, refreshed by its heartbeat, removed when it stops. A second `svc serve` on the same
 * SQLite file reads it and refuses to start while that process lives. Created on PostgreSQL too, so
 * both stores have the same tables; nothing writes it there (several instances share one database).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('serve_owner')
    .addColumn('id', 'integer', (c) => c.primaryKey())
    .addColumn('instance_id', 'text', (c) => c.notNull())
    .addColumn('pid', 'integer', (c) => c.notNull())
    .addColumn('hostname', 'text', (c) => c.notNull())
    .addColumn('pid_scope', 'text')
    .addColumn('pid_started', 'text')
    .addColumn('started_at', 'text', (c) => c.notNull())
    .addColumn('heartbeat_at', 'text', (c) => c.notNull())
    .execute();
}
