import { type Kysely, sql } from 'kysely';
import { chainedReceiptFor } from '../../ledger/chained.js';
import type { Db } from '../../storage/db.js';
import type { CapsuleStatus, GatewayTables } from './model.js';

type G = Kysely<GatewayTables>;
export type PackRow = GatewayTables['gateway_packs'];
export type PayeeRow = GatewayTables['gateway_payees'];
export type CapsuleRow = GatewayTables['gateway_capsules'];

const view = (db: Db): G => db.withTables<GatewayTables>() as unknown as G;

/** The gateway's tables; every method takes the organization, except the receipt-repair sweep's read. */
export function createGatewayRepository(base: Db) {
  const db = view(base);
  return {
    async latestPack(org: string, packId: string): Promise<PackRow | undefined> {
      return db
        .selectFrom('gateway_packs')
        .selectAll()
        .where('organization_id', '=', org)
        .where('pack_id', '=', packId)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
    },

    async pack(org: string, packId: string, version: number): Promise<PackRow | undefined> {
      return db
        .selectFrom('gateway_packs')
        .selectAll()
        .where('organization_id', '=', org)
        .where('pack_id', '=', packId)
        .where('version', '=', version)
        .executeTakeFirst();
    },

    /** Inserts the next version; false when another writer took that version first. */
    async insertPack(row: PackRow): Promise<boolean> {
      const r = await db
        .insertInto('gateway_packs')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'pack_id', 'version']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },

    async payee(org: string, id: string): Promise<PayeeRow | undefined> {
      return db
        .selectFrom('gateway_payees')
        .selectAll()
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    async payeeByHash(org: string, hash: string): Promise<PayeeRow | undefined> {
      return db
        .selectFrom('gateway_payees')
        .selectAll()
        .where('organization_id', '=', org)
        .where('beneficiary_hash', '=', hash)
        .executeTakeFirst();
    },

    /** Registers a payee, or answers the one already registered with the same hash. */
    async registerPayee(row: PayeeRow): Promise<{ row: PayeeRow; created: boolean }> {
      const r = await db
        .insertInto('gateway_payees')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'beneficiary_hash']).doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0) === 1) return { row, created: true };
      const existing = await this.payeeByHash(row.organization_id, row.beneficiary_hash);
      if (!existing) throw new Error('payee vanished while registering');
      return { row: existing, created: false };
    },

    async updatePayee(
      org: string,
      id: string,
      set: Partial<Pick<PayeeRow, 'held' | 'quarantine_lifted_at' | 'quarantine_lifted_by'>>,
      now: string,
    ): Promise<PayeeRow | undefined> {
      await db
        .updateTable('gateway_payees')
        .set({ ...set, updated_at: now })
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .execute();
      return this.payee(org, id);
    },

    async insertCapsule(row: CapsuleRow): Promise<void> {
      await db.insertInto('gateway_capsules').values(row).execute();
    },

    async capsule(org: string, id: string): Promise<CapsuleRow | undefined> {
      return db
        .selectFrom('gateway_capsules')
        .selectAll()
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Moves an active capsule to `status`; false when it was no longer active. A consume also claims
     * the write of the capsule's receipt (see claimReceipt).
     */
    async settleCapsule(
      org: string,
      id: string,
      status: Exclude<CapsuleStatus, 'active'>,
      consumption: string | null,
      now: string,
    ): Promise<boolean> {
      const r = await db
        .updateTable('gateway_capsules')
        .set({
          status,
          consumption,
          updated_at: now,
          ...(status === 'consumed' ? { receipt_claimed_at: now } : {}),
        })
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .where('status', '=', 'active')
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },

    async setCapsuleReceipt(org: string, id: string, receiptId: string): Promise<void> {
      await db
        .updateTable('gateway_capsules')
        .set({ receipt_id: receiptId, receipt_claimed_at: null })
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .execute();
    },

    /**
     * Claims the write of a consumed capsule's owed receipt: false when it has its receipt, or another
     * writer claimed it after `staleBefore` (a claim older than that belongs to a writer that died).
     */
    async claimReceipt(org: string, id: string, now: string, staleBefore: string): Promise<boolean> {
      const r = await db
        .updateTable('gateway_capsules')
        .set({ receipt_claimed_at: now })
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .where('status', '=', 'consumed')
        .where('receipt_id', 'is', null)
        .where((eb) =>
          eb.or([eb('receipt_claimed_at', 'is', null), eb('receipt_claimed_at', '<', staleBefore)]),
        )
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },

    /** Gives a claim back after its write failed, so the next access or sweep retries at once. */
    async releaseReceipt(org: string, id: string, claimedAt: string): Promise<void> {
      await db
        .updateTable('gateway_capsules')
        .set({ receipt_claimed_at: null })
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .where('receipt_claimed_at', '=', claimedAt)
        .execute();
    },

    /** The receipt already chained for a decision (a consume's ledger entry), if any. */
    receiptFor: (org: string, decisionId: string) => chainedReceiptFor(base, org, decisionId),

    /** The highest version of a pack with this content saved by `at`: the one a consume ran under. */
    async packBySha(org: string, packId: string, sha256: string, at: string): Promise<PackRow | undefined> {
      return db
        .selectFrom('gateway_packs')
        .selectAll()
        .where('organization_id', '=', org)
        .where('pack_id', '=', packId)
        .where('sha256', '=', sha256)
        .where('created_at', '<=', at)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
    },

    /** Consumed capsules still owing their receipt, oldest first, across organizations (the repair sweep's read). */
    async owingReceipts(limit: number): Promise<CapsuleRow[]> {
      return (
        db
          .selectFrom('gateway_capsules')
          .selectAll()
          .where('receipt_id', 'is', null)
          // A literal, as in the partial index serving this read (migration 0025).
          .where('status', '=', sql.lit('consumed'))
          .orderBy('updated_at')
          .limit(limit)
          .execute()
      );
    },

    async nonceClaim(org: string, entityId: string, nonce: string) {
      return db
        .selectFrom('gateway_nonces')
        .selectAll()
        .where('organization_id', '=', org)
        .where('entity_id', '=', entityId)
        .where('nonce', '=', nonce)
        .executeTakeFirst();
    },

    /** Claims a nonce for the entity; false when it was already claimed. */
    async claimNonce(org: string, entityId: string, nonce: string, capsuleId: string, now: string) {
      const r = await db
        .insertInto('gateway_nonces')
        .values({ organization_id: org, entity_id: entityId, nonce, capsule_id: capsuleId, claimed_at: now })
        .onConflict((oc) => oc.columns(['organization_id', 'entity_id', 'nonce']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },

    /** Micro-dollars the entity spent (ledger commits with it as payer) since each instant. */
    async entitySpentSince(org: string, entityId: string, since: readonly string[]): Promise<number[]> {
      const rows = await base
        .selectFrom('spend_ledger')
        .select(['amount_micros', 'created_at'])
        .where('organization_id', '=', org)
        .where('payer', '=', entityId)
        .where('kind', '=', 'commit')
        .where('created_at', '>', [...since].sort()[0]!)
        .execute();
      return since.map((s) =>
        rows.filter((r) => r.created_at > s).reduce((sum, r) => sum + Number(r.amount_micros), 0),
      );
    },
  };
}

export type GatewayRepository = ReturnType<typeof createGatewayRepository>;
