import type { Kysely } from 'kysely';

/**
 * An action's authorization and commit each chain one receipt, even when the same request is sent
 * several times at once (on any instance): the request that sets `*_receipt_claimed_at` writes it,
 * the others wait for its id. A claim older than a minute belongs to a writer that died.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('spend_actions').addColumn('authorize_receipt_claimed_at', 'text').execute();
  await db.schema.alterTable('spend_actions').addColumn('commit_receipt_claimed_at', 'text').execute();
}
