import type { Kysely } from 'kysely';

/** The API key that requested an approval (its validate call or POST /v1/approvals); it may not resolve it. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('approvals').addColumn('requested_by_key_id', 'text').execute();
}
