import { type Kysely, sql } from 'kysely';

/**
 * The receipt sweeps read only rows still owing a receipt: partial indexes holding just those rows
 * (almost always none) serve them without scanning the tables. Their conditions are repeated word
 * for word by the sweeps' queries (modules/budgets/repository.ts, modules/payments/repository.ts):
 * a planner uses a partial index only for a query whose WHERE implies the index's.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index spend_actions_owe_authorize_receipt on spend_actions (decided_at, organization_id, action_id) where authorize_receipt_id is null`.execute(
    db,
  );
  await sql`create index spend_actions_owe_commit_receipt on spend_actions (decided_at, organization_id, action_id) where commit_id is not null and commit_receipt_id is null`.execute(
    db,
  );
  await sql`create index gateway_capsules_owe_receipt on gateway_capsules (updated_at) where receipt_id is null and status = 'consumed'`.execute(
    db,
  );
}
