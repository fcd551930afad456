import { type Kysely, sql } from 'kysely';

/**
 * Key lineage: an API key minted by another key belongs to the lineage of the key that minted it;
 * a key a person (or the service, for a project) minted starts its own. A key never resolves an
 * approval, nor approves a draft, that a key of its own lineage asked for, so a key cannot mint the
 * approver, or the requester, that would approve its own calls. Keys, approvals and drafts written
 * before this migration each count as their own lineage: who minted those keys was not recorded.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('api_keys').addColumn('lineage_id', 'text').execute();
  await sql`update api_keys set lineage_id = id`.execute(db);
  await db.schema.alterTable('approvals').addColumn('requested_by_lineage_id', 'text').execute();
  await sql`update approvals set requested_by_lineage_id = requested_by_key_id`.execute(db);
  await db.schema.alterTable('policy_drafts').addColumn('created_by_lineage_id', 'text').execute();
  await sql`update policy_drafts set created_by_lineage_id = created_by_key_id`.execute(db);
}
