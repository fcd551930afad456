import { type Kysely, sql } from 'kysely';

/**
 * The list of resolved approvals (GET /v1/approvals/resolved) pages through an organization's
 * approved and denied approvals, newest resolution first: a partial index holding just those rows
 * in that order serves a page and the count without sorting all of them. Its condition is repeated
 * word for word by the list's query (modules/approvals/repository.ts): a planner uses a partial
 * index only for a query whose WHERE implies the index's.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create index approvals_resolved on approvals (organization_id, resolved_at, id) where status in ('approved', 'denied')`.execute(
    db,
  );
}
