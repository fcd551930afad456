import type { Kysely } from 'kysely';

/**
 * The origin each checkpoint was signed with. It is part of the signed bytes, so a checkpoint must be
 * served with the origin it was signed under, not the reading instance's SVC_BASE_URL. Nullable:
 * rows signed before this column existed do not record theirs (see Checkpointer).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('checkpoints').addColumn('origin', 'text').execute();
}
