import type { ColumnDefinitionBuilder, Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  const org = (c: ColumnDefinitionBuilder) => c.notNull().references('organizations.id').onDelete('cascade');

  await db.schema
    .createTable('tools')
    .addColumn('organization_id', 'text', org)
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('arguments', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('tools_pk', ['organization_id', 'name'])
    .execute();

  await db.schema
    .createTable('policies')
    .addColumn('organization_id', 'text', org)
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text')
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('is_active', 'integer', (c) => c.notNull())
    .addColumn('mode', 'text', (c) => c.notNull())
    .addColumn('constraints', 'text', (c) => c.notNull())
    .addColumn('session_constraints', 'text')
    .addColumn('llm_config', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('policies_pk', ['organization_id', 'tool_name'])
    .execute();

  await db.schema
    .createTable('decisions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', org)
    .addColumn('project_id', 'text')
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('arguments', 'text', (c) => c.notNull())
    .addColumn('context', 'text', (c) => c.notNull())
    .addColumn('decision', 'text', (c) => c.notNull())
    .addColumn('mode', 'text', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull())
    .addColumn('failed_argument', 'text')
    .addColumn('matched_exception', 'text')
    .addColumn('validations', 'text')
    .addColumn('latency_ms', 'real', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('policy_version', 'integer')
    .addColumn('receipt_id', 'text', (c) => c.notNull())
    .addColumn('receipt_hash', 'text', (c) => c.notNull())
    .addColumn('previous_receipt_hash', 'text', (c) => c.notNull())
    .addColumn('merkle_root', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('decisions_org_time')
    .on('decisions')
    .columns(['organization_id', 'created_at'])
    .execute();
  await db.schema
    .createIndex('decisions_org_tool_time')
    .on('decisions')
    .columns(['organization_id', 'tool_name', 'created_at'])
    .execute();
  await db.schema
    .createIndex('decisions_org_project_time')
    .on('decisions')
    .columns(['organization_id', 'project_id', 'created_at'])
    .execute();

  await db.schema
    .createTable('receipts')
    .addColumn('organization_id', 'text', org)
    .addColumn('sequence', 'bigint', (c) => c.notNull())
    .addColumn('receipt_id', 'text', (c) => c.notNull().unique())
    .addColumn('decision_id', 'text')
    .addColumn('receipt_hash', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('receipts_pk', ['organization_id', 'sequence'])
    .execute();
  await db.schema.createIndex('receipts_decision').on('receipts').column('decision_id').execute();

  await db.schema
    .createTable('chain_heads')
    .addColumn('organization_id', 'text', (c) =>
      c.primaryKey().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('sequence', 'bigint', (c) => c.notNull())
    .addColumn('last_hash', 'text', (c) => c.notNull())
    .addColumn('frontier', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('session_counters')
    .addColumn('organization_id', 'text', org)
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('calls', 'integer', (c) => c.notNull())
    .addColumn('cumulative', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('session_counters_pk', ['organization_id', 'session_id', 'tool_name'])
    .execute();
}
