import type { Kysely } from 'kysely';

/**
 * When the request holding an Idempotency-Key was first claimed. A claim left unanswered past the
 * stale age is taken over by the same request sent again: the takeover is a claim of its own (a new
 * `created_at`, the claim's identity and the start of its stale age) that keeps the first claim's
 * time here, so that the decision log records its batch under the same ids as the claim it took
 * over, whose request may still commit (lib/idempotency.ts). Nullable: a key claimed once, and
 * every key claimed before this column existed, has none (its `created_at` is that time).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('gateway_idempotency').addColumn('origin_at', 'text').execute();
}
