import type { Kysely } from 'kysely';

/**
 * The payment-authorization gateway: versioned policy packs, payees, capsules, the nonces they
 * claim (unique per entity, so a nonce is spent once whatever capsule carries it) and the answers
 * kept for Idempotency-Key replays.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const org = 'organization_id';
  await db.schema
    .createTable('gateway_packs')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('pack_id', 'text', (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('sha256', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_packs_pk', [org, 'pack_id', 'version'])
    .execute();
  await db.schema
    .createTable('gateway_payees')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('beneficiary_hash', 'text', (c) => c.notNull())
    .addColumn('details', 'text', (c) => c.notNull())
    .addColumn('held', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('quarantine_lifted_at', 'text')
    .addColumn('quarantine_lifted_by', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_payees_pk', [org, 'id'])
    .addUniqueConstraint('gateway_payees_hash', [org, 'beneficiary_hash'])
    .execute();
  await db.schema
    .createTable('gateway_capsules')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('id', 'text', (c) => c.notNull())
    .addColumn('project_id', 'text')
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('payee_id', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('capsule', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('consumption', 'text')
    .addColumn('receipt_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_capsules_pk', [org, 'id'])
    .execute();
  await db.schema
    .createTable('gateway_nonces')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text', (c) => c.notNull())
    .addColumn('capsule_id', 'text', (c) => c.notNull())
    .addColumn('claimed_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_nonces_pk', [org, 'entity_id', 'nonce'])
    .execute();
  await db.schema
    .createTable('gateway_idempotency')
    .addColumn(org, 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('idempotency_key', 'text', (c) => c.notNull())
    .addColumn('request_hash', 'text', (c) => c.notNull())
    .addColumn('status_code', 'integer')
    .addColumn('response', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('gateway_idempotency_pk', [org, 'idempotency_key'])
    .execute();
  // Entity caps sum the entity's spend over 30 days on the shared ledger at every consume.
  await db.schema
    .createIndex('spend_ledger_payer')
    .on('spend_ledger')
    .columns([org, 'payer', 'created_at'])
    .execute();
}
