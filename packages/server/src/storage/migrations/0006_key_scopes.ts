import { type Kysely, sql } from 'kysely';

/**
 * API key scopes, and who (which key) authored or resolved what, so a key never approves its own
 * request. Keys that exist before this migration keep what they could do: the general API and
 * resolving approvals other keys requested. Keys created afterwards get only what they are made for.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('api_keys').addColumn('scopes', 'text').execute();
  await sql`update api_keys set scopes = ${'["api","approvals:resolve"]'}`.execute(db);
  await db.schema.alterTable('approvals').addColumn('resolved_by_key_id', 'text').execute();
  await db.schema.alterTable('policy_drafts').addColumn('created_by_key_id', 'text').execute();
}
