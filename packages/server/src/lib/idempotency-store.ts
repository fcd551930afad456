import type { Kysely } from 'kysely';
import type { Db } from '../storage/db.js';

/**
 * One Idempotency-Key of an organization (table `gateway_idempotency`, migration 0015): the hash of
 * the request that took it and, once answered, that answer. The table was the gateway's first; the
 * decision log shares it under its own key prefix (see lib/idempotency.ts).
 */
export interface IdempotencyRow {
  organization_id: string;
  idempotency_key: string;
  request_hash: string;
  status_code: number | null;
  response: string | null;
  created_at: string;
}

type K = Kysely<{ gateway_idempotency: IdempotencyRow }>;

/** The stored Idempotency-Keys; every method takes the organization. */
export function createIdempotencyStore(base: Db) {
  const db = base.withTables<{ gateway_idempotency: IdempotencyRow }>() as unknown as K;
  return {
    /** Takes an Idempotency-Key (answer pending); false when the organization already holds it. */
    async takeKey(org: string, key: string, requestHash: string, now: string): Promise<boolean> {
      const r = await db
        .insertInto('gateway_idempotency')
        .values({
          organization_id: org,
          idempotency_key: key,
          request_hash: requestHash,
          status_code: null,
          response: null,
          created_at: now,
        })
        .onConflict((oc) => oc.columns(['organization_id', 'idempotency_key']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },

    async key(org: string, key: string): Promise<IdempotencyRow | undefined> {
      return db
        .selectFrom('gateway_idempotency')
        .selectAll()
        .where('organization_id', '=', org)
        .where('idempotency_key', '=', key)
        .executeTakeFirst();
    },

    async completeKey(org: string, key: string, status: number, response: string): Promise<void> {
      await db
        .updateTable('gateway_idempotency')
        .set({ status_code: status, response })
        .where('organization_id', '=', org)
        .where('idempotency_key', '=', key)
        .execute();
    },

    /** Frees a key: its request failed on the server's side, or (with `before`) it is past retention. */
    async dropKey(org: string, key: string, before?: string): Promise<void> {
      let q = db
        .deleteFrom('gateway_idempotency')
        .where('organization_id', '=', org)
        .where('idempotency_key', '=', key);
      if (before !== undefined) q = q.where('created_at', '<', before);
      await q.execute();
    },

    /**
     * Deletes the organization's keys starting with `prefix` (no `%` or `_` in it) created before
     * `before`: kept past their retention they could only ever be dropped when reused.
     */
    async dropExpired(org: string, prefix: string, before: string): Promise<void> {
      await db
        .deleteFrom('gateway_idempotency')
        .where('organization_id', '=', org)
        .where('idempotency_key', 'like', `${prefix}%`)
        .where('created_at', '<', before)
        .execute();
    },
  };
}

export type IdempotencyStore = ReturnType<typeof createIdempotencyStore>;
