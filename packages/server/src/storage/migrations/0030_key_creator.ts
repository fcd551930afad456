import type { Kysely } from 'kysely';

/**
 * Key creators, for dual control: `api_keys.created_by` is the person (user id) who created the key
 * with their user token, or, for a key minted by a key, that key's creator (a lineage shares its
 * root's creator). An approval step relayed through a key counts as given by that person as well as
 * by the person it names, and `approvals.requested_by_key_creator` keeps the creator of the key that
 * asked (read from api_keys when the approval opens), who may not approve it under dual control.
 *
 * Null where nobody is known: keys written before this migration (who created them was not recorded),
 * a project's automatic key (the service mints it), keys minted by such keys, and approvals opened by
 * such keys. A key without a creator never gives a dual-control approval (it could be anyone's).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('api_keys').addColumn('created_by', 'text').execute();
  await db.schema.alterTable('approvals').addColumn('requested_by_key_creator', 'text').execute();
}
