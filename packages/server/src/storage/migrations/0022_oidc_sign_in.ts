import type { Kysely } from 'kysely';

/**
 * Dashboard sign-in through an OpenID Connect provider: one row per sign-in under way, from the
 * redirect to the provider until its answer comes back (single use, ten minutes at most). The row
 * holds the PKCE verifier and the nonce; it is found by the SHA-256 of the `state` parameter.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('oidc_sign_ins')
    .addColumn('state_hash', 'text', (c) => c.primaryKey())
    .addColumn('code_verifier', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('oidc_sign_ins_expiry').on('oidc_sign_ins').column('expires_at').execute();
}
