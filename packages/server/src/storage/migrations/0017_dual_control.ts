import { type Kysely, sql } from 'kysely';

/**
 * Dual control: an approval counts the distinct people it needs (`required_approvals`, 1 unless a
 * gateway mint at or above the pack's dual-control threshold opened it), keeps the approvals given so
 * far (`approvers`, a JSON array of {resolvedBy, resolvedAt, byKeyId}) and the person who asked for it
 * (`requested_by`, null when an API key did), who may not be one of the approvers.
 *
 * A consumed capsule owes its receipt until `receipt_id` is set: `receipt_claimed_at` marks the
 * writer working on it (the consume itself, or a repair after that write failed), and a partial index
 * finds the owed ones for the repair sweep.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('approvals')
    .addColumn('required_approvals', 'integer', (c) => c.notNull().defaultTo(1))
    .execute();
  await db.schema
    .alterTable('approvals')
    .addColumn('approvers', 'text', (c) => c.notNull().defaultTo('[]'))
    .execute();
  await db.schema.alterTable('approvals').addColumn('requested_by', 'text').execute();
  await db.schema.alterTable('gateway_capsules').addColumn('receipt_claimed_at', 'text').execute();
  await db.schema
    .createIndex('gateway_capsules_receipt_owed')
    .on('gateway_capsules')
    .columns(['updated_at'])
    .where(sql.ref('receipt_id'), 'is', null)
    .execute();
}
