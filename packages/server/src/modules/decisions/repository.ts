import { type Kysely, type Selectable, type SelectQueryBuilder, sql } from 'kysely';
import type { Database, DecisionsTable } from '../../storage/schema.js';

export type DecisionRow = Selectable<DecisionsTable>;

export interface DecisionFilter {
  projectId?: string;
  toolName?: string;
  decision?: string;
  /** Inclusive lower bound on created_at (ISO 8601 UTC). */
  from?: string;
  /** Exclusive upper bound on created_at (ISO 8601 UTC). */
  before?: string;
}

export interface DayCount {
  day: string;
  decision: string;
  mode: string;
  n: number;
}

// created_at is ISO 8601 UTC text on both stores: its first 10 characters are the UTC day.
const DAY = sql<string>`substr(created_at, 1, 10)`;

/** Decision storage reads; every method is scoped by organization. Writes go through DecisionWriter. */
export function createDecisionRepository(db: Kysely<Database>) {
  function filtered<O>(
    q: SelectQueryBuilder<Database, 'decisions', O>,
    organizationId: string,
    f: DecisionFilter,
  ): SelectQueryBuilder<Database, 'decisions', O> {
    let r = q.where('organization_id', '=', organizationId);
    if (f.projectId !== undefined) r = r.where('project_id', '=', f.projectId);
    if (f.toolName !== undefined) r = r.where('tool_name', '=', f.toolName);
    if (f.decision !== undefined) r = r.where('decision', '=', f.decision);
    if (f.from !== undefined) r = r.where('created_at', '>=', f.from);
    if (f.before !== undefined) r = r.where('created_at', '<', f.before);
    return r;
  }

  return {
    /** One page, newest first, and the number of rows matching the filter. */
    async list(
      organizationId: string,
      filter: DecisionFilter,
      limit: number,
      offset: number,
    ): Promise<{ rows: DecisionRow[]; total: number }> {
      const [rows, count] = await Promise.all([
        filtered(db.selectFrom('decisions').selectAll(), organizationId, filter)
          .orderBy('created_at', 'desc')
          .orderBy('id', 'desc')
          .limit(limit)
          .offset(offset)
          .execute(),
        filtered(
          db.selectFrom('decisions').select((eb) => eb.fn.countAll<number>().as('n')),
          organizationId,
          filter,
        ).executeTakeFirstOrThrow(),
      ]);
      return { rows, total: Number(count.n) };
    },

    async get(organizationId: string, id: string): Promise<DecisionRow | undefined> {
      return db
        .selectFrom('decisions')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** Counts per UTC day, decision and mode, grouped in SQL. */
    async countByDay(organizationId: string, filter: DecisionFilter): Promise<DayCount[]> {
      const rows = await filtered(
        db
          .selectFrom('decisions')
          .select((eb) => [DAY.as('day'), 'decision', 'mode', eb.fn.countAll<number>().as('n')]),
        organizationId,
        filter,
      )
        .groupBy([DAY, 'decision', 'mode'])
        .execute();
      return rows.map((r) => ({ day: r.day, decision: r.decision, mode: r.mode, n: Number(r.n) }));
    },
  };
}

export type DecisionRepository = ReturnType<typeof createDecisionRepository>;
