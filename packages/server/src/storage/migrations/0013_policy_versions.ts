import type { Kysely } from 'kysely';
import { hashJson } from '../../ledger/canonical.js';
import type { Database } from '../schema.js';

/**
 * Every version of every policy, so that any receipt's policy_hash can be checked against the
 * definition it names. Existing policies are recorded at their current version; their earlier
 * versions were not kept before this table existed.
 */
export async function up(raw: Kysely<unknown>): Promise<void> {
  const db = raw as Kysely<Pick<Database, 'policies' | 'policy_versions'>>;
  await db.schema
    .createTable('policy_versions')
    .addColumn('organization_id', 'text', (c) =>
      c.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('policy_hash', 'text', (c) => c.notNull())
    .addColumn('mode', 'text', (c) => c.notNull())
    .addColumn('constraints', 'text', (c) => c.notNull())
    .addColumn('session_constraints', 'text')
    .addColumn('llm_config', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('policy_versions_pk', ['organization_id', 'tool_name', 'version', 'policy_hash'])
    .execute();
  const rows = await db.selectFrom('policies').selectAll().execute();
  for (const r of rows) {
    const definition = {
      mode: r.mode,
      constraints: JSON.parse(r.constraints),
      sessionConstraints: r.session_constraints ? JSON.parse(r.session_constraints) : null,
      llmConfig: r.llm_config ? JSON.parse(r.llm_config) : null,
    };
    await db
      .insertInto('policy_versions')
      .values({
        organization_id: r.organization_id,
        tool_name: r.tool_name,
        version: r.version,
        policy_hash: hashJson(definition),
        mode: r.mode,
        constraints: r.constraints,
        session_constraints: r.session_constraints,
        llm_config: r.llm_config,
        created_at: r.updated_at,
      })
      .execute();
  }
}
