import type { Kysely, Selectable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { CharterConversationsTable, CharterVerificationsTable, Database } from '../../storage/schema.js';

export type ConversationRow = Selectable<CharterConversationsTable>;
export type VerificationRow = Selectable<CharterVerificationsTable>;

/** Charter's storage; every method takes the organization. */
export function createCharterRepository(db: Kysely<Database>) {
  return {
    async getConversation(organizationId: string, id: string): Promise<ConversationRow | undefined> {
      return db
        .selectFrom('charter_conversations')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    async saveConversation(row: ConversationRow): Promise<void> {
      await db
        .insertInto('charter_conversations')
        .values(row)
        .onConflict((oc) =>
          oc
            .column('id')
            .doUpdateSet({ last_tool: row.last_tool, turns: row.turns, updated_at: row.updated_at }),
        )
        .execute();
    },

    async insertVerification(row: VerificationRow): Promise<void> {
      await db.insertInto('charter_verifications').values(row).execute();
    },

    async getVerification(
      organizationId: string,
      id: string,
      trx: Db = db,
    ): Promise<VerificationRow | undefined> {
      return trx
        .selectFrom('charter_verifications')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** For the review page, which carries no credentials: found by id, checked by the link secret. */
    async getVerificationForLink(id: string): Promise<VerificationRow | undefined> {
      return db.selectFrom('charter_verifications').selectAll().where('id', '=', id).executeTakeFirst();
    },

    async listPending(organizationId: string): Promise<VerificationRow[]> {
      return db
        .selectFrom('charter_verifications')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('status', '=', 'pending')
        .orderBy('created_at', 'desc')
        .limit(100)
        .execute();
    },

    /** pending → approved/rejected in one conditional UPDATE: of two people deciding at once, one wins. */
    async resolve(
      organizationId: string,
      id: string,
      status: 'approved' | 'rejected',
      by: string,
      at: string,
      applied: string | null,
      trx: Db = db,
    ): Promise<boolean> {
      const res = await trx
        .updateTable('charter_verifications')
        .set({ status, resolved_by: by, resolved_at: at, applied })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .executeTakeFirst();
      return Number(res.numUpdatedRows) === 1;
    },
  };
}

export type CharterRepository = ReturnType<typeof createCharterRepository>;
