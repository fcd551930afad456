import type { Kysely } from 'kysely';
import type { Database } from '../../storage/schema.js';

export interface ReceiptLine {
  sequence: number;
  payload: string;
}

/** Receipt storage reads; every method is scoped by organization. Writes go through DecisionWriter. */
export function createReceiptRepository(db: Kysely<Database>) {
  return {
    /** Number of receipts in the organization's chain (= the next sequence to assign). */
    async chainLength(organizationId: string): Promise<number> {
      const row = await db
        .selectFrom('chain_heads')
        .select('sequence')
        .where('organization_id', '=', organizationId)
        .executeTakeFirst();
      return row ? Number(row.sequence) : 0;
    },

    /** Receipts with from <= sequence < before, in chain order, at most `limit`. */
    async page(organizationId: string, from: number, before: number, limit: number): Promise<ReceiptLine[]> {
      const rows = await db
        .selectFrom('receipts')
        .select(['sequence', 'payload'])
        .where('organization_id', '=', organizationId)
        .where('sequence', '>=', from)
        .where('sequence', '<', before)
        .orderBy('sequence')
        .limit(limit)
        .execute();
      return rows.map((r) => ({ sequence: Number(r.sequence), payload: r.payload }));
    },

    /**
     * The stored payload of the receipt that recorded a decision. Joined through the decision's own
     * receipt_id: later receipts (approval resolutions) may carry the same decision_id.
     */
    async payloadOfDecision(organizationId: string, decisionId: string): Promise<string | undefined> {
      const row = await db
        .selectFrom('decisions as d')
        .innerJoin('receipts as r', (j) =>
          j.onRef('r.receipt_id', '=', 'd.receipt_id').onRef('r.organization_id', '=', 'd.organization_id'),
        )
        .select('r.payload')
        .where('d.organization_id', '=', organizationId)
        .where('d.id', '=', decisionId)
        .executeTakeFirst();
      return row?.payload;
    },
  };
}

export type ReceiptRepository = ReturnType<typeof createReceiptRepository>;
