import type { ExpressionBuilder, Kysely } from 'kysely';
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
  /** When the claim was taken: its identity, and the start of its stale age. */
  created_at: string;
  /**
   * When this key's current request was first claimed, if the claim held now took over an earlier
   * one (migration 0026); null when it did not, `created_at` being that time. See `takeOver`.
   */
  origin_at: string | null;
}

type Tables = { gateway_idempotency: IdempotencyRow };
type K = Kysely<Tables>;

/** The claim of `key` taken at `claimedAt` (its `created_at`), while it is still unanswered. */
const unansweredClaim =
  (org: string, key: string, claimedAt: string) => (eb: ExpressionBuilder<Tables, 'gateway_idempotency'>) =>
    eb.and([
      eb('organization_id', '=', org),
      eb('idempotency_key', '=', key),
      eb('created_at', '=', claimedAt),
      eb('status_code', 'is', null),
    ]);

/** The stored Idempotency-Keys; every method takes the organization. */
export function createIdempotencyStore(base: Db) {
  const db = base.withTables<Tables>() as unknown as K;
  return {
    /**
     * Takes an Idempotency-Key (answer pending); false when the organization already holds it. The
     * claim is known by `now`, its `created_at` as stored: answering or freeing it names that time.
     */
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
          origin_at: null,
        })
        .onConflict((oc) => oc.columns(['organization_id', 'idempotency_key']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },

    /**
     * Takes over the unanswered claim taken at `claimedAt` (abandoned: left unanswered past the stale
     * age) for the same request, in one statement: the new claim is known by `now`, its `created_at`
     * as stored, and keeps the time its request was first claimed (`origin_at`, that claim's own or
     * the one it kept), from which what the request does may be derived (the decision log's ids).
     * False, and nothing written, when that claim is no longer there (answered, freed or taken over).
     */
    async takeOver(org: string, key: string, claimedAt: string, now: string): Promise<boolean> {
      const r = await db
        .updateTable('gateway_idempotency')
        .set((eb) => ({
          created_at: now,
          origin_at: eb.fn.coalesce('origin_at', 'created_at'),
        }))
        .where(unansweredClaim(org, key, claimedAt))
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },

    async key(org: string, key: string): Promise<IdempotencyRow | undefined> {
      return db
        .selectFrom('gateway_idempotency')
        .selectAll()
        .where('organization_id', '=', org)
        .where('idempotency_key', '=', key)
        .executeTakeFirst();
    },

    /**
     * Stores the answer of the claim taken at `claimedAt` (its `created_at` as stored): false, and
     * nothing written, when that claim is no longer there (it was taken over, or is answered).
     */
    async completeKey(
      org: string,
      key: string,
      claimedAt: string,
      status: number,
      response: string,
    ): Promise<boolean> {
      const r = await db
        .updateTable('gateway_idempotency')
        .set({ status_code: status, response })
        .where(unansweredClaim(org, key, claimedAt))
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },

    /**
     * Frees the key held by the unanswered claim taken at `claimedAt`: its request failed on the
     * server's side or said "retry later", or the claim was abandoned. Another claim of the key, or
     * one answered meanwhile, is left alone.
     */
    async dropClaim(org: string, key: string, claimedAt: string): Promise<void> {
      await db
        .deleteFrom('gateway_idempotency')
        .where(unansweredClaim(org, key, claimedAt))
        .execute();
    },

    /** Frees a key past retention: only the row taken at `createdAt`, answered or not. */
    async dropKey(org: string, key: string, createdAt: string): Promise<void> {
      await db
        .deleteFrom('gateway_idempotency')
        .where('organization_id', '=', org)
        .where('idempotency_key', '=', key)
        .where('created_at', '=', createdAt)
        .execute();
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
