import type { ColumnDefinitionBuilder, Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  const org = (c: ColumnDefinitionBuilder) => c.notNull().references('organizations.id').onDelete('cascade');

  await db.schema
    .createTable('approvals')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', org)
    .addColumn('project_id', 'text')
    .addColumn('decision_id', 'text')
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('arguments', 'text', (c) => c.notNull())
    .addColumn('argument_hash', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('resolved_by', 'text')
    .addColumn('resolved_at', 'text')
    .addColumn('used_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  // The pending queue of an organization, and the sweeper's scan over every organization.
  await db.schema
    .createIndex('approvals_org_status')
    .on('approvals')
    .columns(['organization_id', 'status', 'expires_at'])
    .execute();
  await db.schema
    .createIndex('approvals_status_expiry')
    .on('approvals')
    .columns(['status', 'expires_at'])
    .execute();

  await db.schema
    .createTable('policy_drafts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', org)
    .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('created_by_agent_id', 'text', (c) => c.notNull())
    .addColumn('rules', 'text', (c) => c.notNull())
    .addColumn('reviewed_by', 'text')
    .addColumn('reviewed_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('policy_drafts_org_time')
    .on('policy_drafts')
    .columns(['organization_id', 'created_at'])
    .execute();
  await db.schema.createIndex('policy_drafts_project').on('policy_drafts').column('project_id').execute();
}
