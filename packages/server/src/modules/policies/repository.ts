import type { ExpressionBuilder, Kysely, Selectable } from 'kysely';
import { hashJson } from '../../ledger/canonical.js';
import type { Db } from '../../storage/db.js';
import type { Database, PoliciesTable, PolicyVersionsTable } from '../../storage/schema.js';
import { definitionOf } from './cache.js';

export type PolicyRow = Selectable<PoliciesTable>;
export type PolicyVersionRow = Selectable<PolicyVersionsTable>;

/**
 * What a policy's ETag covers (see policyEtag): its version, its definition and when this
 * incarnation was created. A write conditioned on it applies only while the row is still in it.
 */
export type PolicyState = Pick<
  PolicyRow,
  'version' | 'created_at' | 'mode' | 'constraints' | 'session_constraints' | 'llm_config'
>;

/** The condition "the policy is still in `state`", for an UPDATE or DELETE of the row. */
function inState(eb: ExpressionBuilder<Database, 'policies'>, state: PolicyState) {
  const same = (column: 'session_constraints' | 'llm_config', value: string | null) =>
    value === null ? eb(column, 'is', null) : eb(column, '=', value);
  return eb.and([
    eb('version', '=', state.version),
    eb('created_at', '=', state.created_at),
    eb('mode', '=', state.mode),
    eb('constraints', '=', state.constraints),
    same('session_constraints', state.session_constraints),
    same('llm_config', state.llm_config),
  ]);
}

/** Runs `work` in the caller's transaction, or in a new one: a policy write and its version row commit together. */
function atomically<T>(trx: Db, work: (trx: Db) => Promise<T>): Promise<T> {
  return trx.isTransaction ? work(trx) : (trx as Kysely<Database>).transaction().execute(work);
}

/** Keeps the definition a policy has at `row.version`: receipts name it by version and hash. */
async function recordVersion(trx: Db, row: PolicyRow): Promise<void> {
  await trx
    .insertInto('policy_versions')
    .values({
      organization_id: row.organization_id,
      tool_name: row.tool_name,
      version: row.version,
      policy_hash: hashJson(definitionOf(row)),
      mode: row.mode,
      constraints: row.constraints,
      session_constraints: row.session_constraints,
      llm_config: row.llm_config,
      created_at: row.updated_at,
    })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/**
 * `at`, or the stored `updated_at` if that is later: writes that race (each stamped when its request
 * began) never move a policy's time back, so each version is dated no earlier than the one before.
 */
function laterOf(eb: ExpressionBuilder<Database, 'policies'>, at: string) {
  return eb.case().when('updated_at', '>', at).then(eb.ref('updated_at')).else(eb.val(at)).end();
}

/** Policy storage: one policy per tool per organization; every method is scoped by organization. */
export function createPolicyRepository(db: Kysely<Database>) {
  return {
    async get(organizationId: string, toolName: string, trx: Db = db): Promise<PolicyRow | undefined> {
      return trx
        .selectFrom('policies')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName)
        .executeTakeFirst();
    },

    async list(organizationId: string): Promise<PolicyRow[]> {
      return db
        .selectFrom('policies')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('tool_name')
        .execute();
    },

    /** Inserts; throws a unique violation when the tool already has a policy. */
    async insert(row: PolicyRow, trx: Db = db): Promise<void> {
      await atomically(trx, async (t) => {
        await t.insertInto('policies').values(row).execute();
        await recordVersion(t, row);
      });
    },

    /** Inserts unless the tool already has a policy; returns whether it inserted (race-safe on both stores). */
    async insertIfAbsent(row: PolicyRow, trx: Db = db): Promise<boolean> {
      return atomically(trx, async (t) => {
        const inserted = await t
          .insertInto('policies')
          .values(row)
          .onConflict((oc) => oc.columns(['organization_id', 'tool_name']).doNothing())
          .returning('tool_name')
          .executeTakeFirst();
        if (inserted !== undefined) await recordVersion(t, row);
        return inserted !== undefined;
      });
    },

    /** Replaces the definition (and optionally activity) and bumps the version atomically; returns the new row. */
    async replace(
      organizationId: string,
      toolName: string,
      patch: Pick<
        PolicyRow,
        'mode' | 'constraints' | 'session_constraints' | 'llm_config' | 'project_id' | 'updated_at'
      > &
        Partial<Pick<PolicyRow, 'is_active'>>,
      trx: Db = db,
      /**
       * Replace only if the stored version is still this one (a read-modify-write must not lose an
       * update), or, given a state, only while the policy is still exactly in it (If-Match).
       */
      expected?: number | PolicyState,
    ): Promise<PolicyRow | undefined> {
      return atomically(trx, async (t) => {
        let q = t
          .updateTable('policies')
          .set((eb) => ({
            ...patch,
            updated_at: laterOf(eb, patch.updated_at),
            version: eb('version', '+', 1),
          }))
          .where('organization_id', '=', organizationId)
          .where('tool_name', '=', toolName);
        if (typeof expected === 'number') q = q.where('version', '=', expected);
        else if (expected !== undefined) q = q.where((eb) => inState(eb, expected));
        const res = await q.executeTakeFirst();
        if (Number(res.numUpdatedRows) === 0) return undefined;
        const row = await this.get(organizationId, toolName, t);
        if (row) await recordVersion(t, row);
        return row;
      });
    },

    /**
     * Every recorded version of a tool's policy, newest first. A policy deleted and created again
     * starts at version 1 again: both incarnations stay listed, told apart by policy_hash and date.
     */
    async versions(organizationId: string, toolName: string, version?: number): Promise<PolicyVersionRow[]> {
      let q = db
        .selectFrom('policy_versions')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName)
        .orderBy('created_at', 'desc')
        .orderBy('version', 'desc');
      if (version !== undefined) q = q.where('version', '=', version);
      return q.execute();
    },

    async setActive(
      organizationId: string,
      toolName: string,
      active: boolean,
      at: string,
      projectId: string | null,
      /** Only while the policy is still exactly in this state (If-Match). */
      expected?: PolicyState,
    ): Promise<boolean> {
      let q = db
        .updateTable('policies')
        .set((eb) => ({ is_active: active ? 1 : 0, updated_at: laterOf(eb, at), project_id: projectId }))
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName);
      if (expected) q = q.where((eb) => inState(eb, expected));
      const res = await q.executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    /** Deletes the policy (given a state, only while it is still exactly in it: If-Match); whether it did. */
    async delete(
      organizationId: string,
      toolName: string,
      trx: Db = db,
      expected?: PolicyState,
    ): Promise<boolean> {
      let q = trx
        .deleteFrom('policies')
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName);
      if (expected) q = q.where((eb) => inState(eb, expected));
      const res = await q.executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type PolicyRepository = ReturnType<typeof createPolicyRepository>;
