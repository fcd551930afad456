import type { Kysely } from 'kysely';

/** Charter conversations and the verifications its proposed changes wait in until a person decides. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('charter_conversations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', (c) =>
      c.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('project_id', 'text')
    .addColumn('last_tool', 'text')
    // JSON array of the last turns ({role, text, at}); bounded by the service.
    .addColumn('turns', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('charter_verifications')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('organization_id', 'text', (c) =>
      c.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('project_id', 'text')
    .addColumn('conversation_id', 'text')
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('summary', 'text', (c) => c.notNull())
    // JSON: the policy changes (with the version each was proposed against) or the tools to register.
    .addColumn('changes', 'text', (c) => c.notNull())
    .addColumn('tools', 'text', (c) => c.notNull())
    // sha256 of the secret in the review link; the page answers only with it.
    .addColumn('link_hash', 'text', (c) => c.notNull())
    .addColumn('requested_by', 'text', (c) => c.notNull())
    .addColumn('applied', 'text')
    .addColumn('resolved_by', 'text')
    .addColumn('resolved_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('charter_verifications_org_status')
    .on('charter_verifications')
    .columns(['organization_id', 'status', 'created_at'])
    .execute();
}
