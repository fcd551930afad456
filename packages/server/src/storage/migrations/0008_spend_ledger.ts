import type { ColumnDefinitionBuilder, Kysely } from 'kysely';

/**
 * Spend budgets. `spend_ledger` is the organization's append-only record of every authorization,
 * reservation, commit, release and expiry; `spend_balances` is its running sum per budget scope and
 * window, written in the same transaction as each entry; `spend_actions` is the current state of each
 * action id (idempotency and the reservation to settle); `spend_heads` is the row an authorization
 * locks so that concurrent ones on any number of processes are decided one after the other.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const org = (c: ColumnDefinitionBuilder) => c.notNull().references('organizations.id').onDelete('cascade');

  await db.schema
    .createTable('economic_configs')
    .addColumn('organization_id', 'text', org)
    // '' for the organization's own configuration, else the project id.
    .addColumn('scope_key', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text', (c) => c.references('projects.id').onDelete('cascade'))
    .addColumn('config', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('economic_configs_pk', ['organization_id', 'scope_key'])
    .execute();

  await db.schema
    .createTable('spend_heads')
    .addColumn('organization_id', 'text', (c) =>
      c.primaryKey().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('sequence', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('spend_ledger')
    .addColumn('organization_id', 'text', org)
    .addColumn('sequence', 'bigint', (c) => c.notNull())
    .addColumn('id', 'text', (c) => c.notNull().unique())
    .addColumn('project_id', 'text')
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('action_id', 'text', (c) => c.notNull())
    .addColumn('reservation_id', 'text')
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('category', 'text', (c) => c.notNull())
    .addColumn('payer', 'text')
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('amount_micros', 'bigint', (c) => c.notNull())
    .addColumn('decision', 'text')
    .addColumn('reason_code', 'text')
    .addColumn('approval_id', 'text')
    .addColumn('agent_window', 'text', (c) => c.notNull())
    .addColumn('category_window', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('spend_ledger_pk', ['organization_id', 'sequence'])
    .execute();
  await db.schema
    .createIndex('spend_ledger_action')
    .on('spend_ledger')
    .columns(['organization_id', 'action_id'])
    .execute();

  await db.schema
    .createTable('spend_balances')
    .addColumn('organization_id', 'text', org)
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('scope_key', 'text', (c) => c.notNull())
    .addColumn('period', 'text', (c) => c.notNull())
    .addColumn('spent_micros', 'bigint', (c) => c.notNull())
    .addColumn('reserved_micros', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('spend_balances_pk', ['organization_id', 'scope', 'scope_key', 'period'])
    .execute();

  await db.schema
    .createTable('spend_actions')
    .addColumn('organization_id', 'text', org)
    .addColumn('action_id', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text')
    .addColumn('request_hash', 'text', (c) => c.notNull())
    .addColumn('request', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('answer', 'text', (c) => c.notNull())
    .addColumn('approval_id', 'text')
    .addColumn('authorization_id', 'text', (c) => c.notNull())
    .addColumn('reservation_id', 'text')
    .addColumn('amount_micros', 'bigint', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('category', 'text', (c) => c.notNull())
    .addColumn('agent_window', 'text', (c) => c.notNull())
    .addColumn('category_window', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text')
    .addColumn('decided_at', 'text', (c) => c.notNull())
    .addColumn('authorize_receipt_id', 'text')
    .addColumn('commit_id', 'text')
    .addColumn('commit_hash', 'text')
    .addColumn('commit_answer', 'text')
    .addColumn('commit_receipt_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('spend_actions_pk', ['organization_id', 'action_id'])
    .execute();
  // Reservations due to expire, and the pending approvals of a session or agent (status).
  await db.schema
    .createIndex('spend_actions_state')
    .on('spend_actions')
    .columns(['organization_id', 'state', 'expires_at'])
    .execute();
}
