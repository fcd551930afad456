import type { Kysely } from 'kysely';

/**
 * The gateway's invoices (ingested documents, their canonical hash and parsed terms), workflows
 * (one state machine per organization, entity and workflow id), the payment providers an
 * organization routes rails to, and the payments handed to them (one row per capsule: the
 * attempt's state, its idempotency key and the provider's reference).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const org = 'organization_id';
  await db.schema
    .createTable('gateway_invoices')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text')
    .addColumn('invoice_hash', 'text', (c) => c.notNull())
    .addColumn('format', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('document', 'text', (c) => c.notNull())
    .addColumn('terms', 'text')
    .addColumn('beneficiary_hash', 'text')
    .addColumn('parse_error', 'text')
    .addColumn('capsule_id', 'text')
    .addColumn('consumed_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_invoices_pk', [org, 'id'])
    .addUniqueConstraint('gateway_invoices_hash', [org, 'invoice_hash'])
    .execute();
  await db.schema
    .createTable('gateway_workflows')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('workflow_id', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text')
    .addColumn('pack_id', 'text')
    .addColumn('map', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('capsule_id', 'text')
    .addColumn('history', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_workflows_pk', [org, 'entity_id', 'workflow_id'])
    .execute();
  await db.schema
    .createTable('gateway_providers')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('rail', 'text', (c) => c.notNull())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('credentials', 'text')
    .addColumn('credential_names', 'text', (c) => c.notNull())
    .addColumn('timeout_ms', 'integer', (c) => c.notNull())
    .addColumn('enabled', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_providers_pk', [org, 'id'])
    .addUniqueConstraint('gateway_providers_rail', [org, 'rail'])
    .execute();
  await db.schema
    .createTable('gateway_payments')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('capsule_id', 'text', (c) => c.notNull())
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('provider_id', 'text', (c) => c.notNull())
    .addColumn('rail', 'text', (c) => c.notNull())
    .addColumn('amount_micros', 'bigint', (c) => c.notNull())
    .addColumn('request', 'text', (c) => c.notNull())
    .addColumn('idempotency_key', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('lease_until', 'text', (c) => c.notNull())
    .addColumn('reference', 'text')
    .addColumn('last_error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_payments_pk', [org, 'capsule_id'])
    .execute();
  // Entity caps count the payments in flight (or of unknown outcome) next to the ledger's commits.
  await db.schema
    .createIndex('gateway_payments_entity')
    .on('gateway_payments')
    .columns([org, 'entity_id', 'state'])
    .execute();
}
