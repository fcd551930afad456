import type { Kysely } from 'kysely';
import type { Clock } from '../../lib/clock.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Db } from '../../storage/db.js';
import { checkEntityId } from './entity-id.js';
import {
  type FlowTables,
  flowError,
  type WorkflowAnswer,
  type WorkflowMap,
  type WorkflowRow,
} from './flow-model.js';
import { gatewayError, type PackContent } from './model.js';

type F = Kysely<FlowTables>;
const view = (db: Db): F => db.withTables<FlowTables>() as unknown as F;

/** draft → approved → consumed → settled | failed; draft | approved → cancelled. */
export const DEFAULT_WORKFLOW_MAP: WorkflowMap = {
  initial: 'draft',
  edges: {
    draft: ['approved', 'cancelled'],
    approved: ['consumed', 'cancelled'],
    consumed: ['settled', 'failed'],
    settled: [],
    failed: [],
    cancelled: [],
  },
  consume_from: 'approved',
  consume_to: 'consumed',
  settle_to: 'settled',
  person_states: ['approved'],
};

/** A pack's own map (member `workflow`), with the default's members where it leaves them out. */
export interface WorkflowMapInput {
  initial?: string;
  edges: Record<string, string[]>;
  consume_from?: string;
  consume_to?: string;
  settle_to?: string | null;
  person_states?: string[];
}

const STATE = /^[a-z][a-z0-9_]{0,31}$/;

/** Checks a pack's map: every state named is a key of `edges`, and consume and settle are edges. */
export function workflowMapOf(input: WorkflowMapInput): WorkflowMap {
  const bad = (param: string, message: string) =>
    gatewayError.invalidRequest(`workflow.${param} ${message}`, `workflow.${param}`);
  const states = Object.keys(input.edges);
  if (states.length === 0 || states.length > 32) throw bad('edges', 'must name 1-32 states');
  for (const s of states) {
    if (!STATE.test(s)) throw bad('edges', `state ${s} must match ${STATE.source}`);
    const next = input.edges[s]!;
    if (new Set(next).size !== next.length) throw bad(`edges.${s}`, 'names a state twice');
    for (const n of next)
      if (!states.includes(n)) throw bad(`edges.${s}`, `names ${n}, which is not a state`);
  }
  const map: WorkflowMap = {
    initial: input.initial ?? states[0]!,
    edges: Object.fromEntries(states.map((s) => [s, [...input.edges[s]!]])),
    consume_from: input.consume_from ?? 'approved',
    consume_to: input.consume_to ?? 'consumed',
    settle_to:
      input.settle_to === undefined ? (states.includes('settled') ? 'settled' : null) : input.settle_to,
    person_states: input.person_states ?? (states.includes('approved') ? ['approved'] : []),
  };
  for (const m of ['initial', 'consume_from', 'consume_to'] as const) {
    if (!states.includes(map[m])) throw bad(m, `names ${map[m]}, which is not a state`);
  }
  if (!map.edges[map.consume_from]!.includes(map.consume_to)) {
    throw bad('consume_to', `must be a next state of ${map.consume_from}`);
  }
  if (map.settle_to !== null && !map.edges[map.consume_to]!.includes(map.settle_to)) {
    throw bad('settle_to', `must be a next state of ${map.consume_to}`);
  }
  for (const s of map.person_states)
    if (!states.includes(s)) throw bad('person_states', `names ${s}, not a state`);
  return map;
}

/** The pack's map, or the default. */
export const mapOfPack = (pack: PackContent): WorkflowMap => pack.workflow ?? DEFAULT_WORKFLOW_MAP;

export function createWorkflowRepository(base: Db) {
  const db = view(base);
  return {
    async insert(row: WorkflowRow): Promise<boolean> {
      const r = await db
        .insertInto('gateway_workflows')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'entity_id', 'workflow_id']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },
    async get(org: string, entityId: string, workflowId: string) {
      return db
        .selectFrom('gateway_workflows')
        .selectAll()
        .where('organization_id', '=', org)
        .where('entity_id', '=', entityId)
        .where('workflow_id', '=', workflowId)
        .executeTakeFirst();
    },
    /**
     * Moves the workflow from `from` (compare-and-set); false when it was no longer there, or its
     * capsule binding no longer what `bound` requires: `{is}` exactly that capsule (null: none),
     * `{freeFor}` none or that capsule. `capsuleId` binds it to that capsule; null leaves the
     * binding as it is, unless `unbind`.
     */
    async move(
      org: string,
      row: WorkflowRow,
      from: string,
      to: string,
      entry: WorkflowAnswer['history'][number],
      capsuleId: string | null,
      bound?: { is: string | null } | { freeFor: string },
      unbind = false,
    ): Promise<boolean> {
      const history = [...(JSON.parse(row.history) as WorkflowAnswer['history']), entry];
      let q = db
        .updateTable('gateway_workflows')
        .set({
          state: to,
          history: JSON.stringify(history),
          updated_at: entry.at,
          ...(capsuleId !== null ? { capsule_id: capsuleId } : unbind ? { capsule_id: null } : {}),
        })
        .where('organization_id', '=', org)
        .where('entity_id', '=', row.entity_id)
        .where('workflow_id', '=', row.workflow_id)
        .where('state', '=', from);
      if (bound && 'is' in bound) {
        const is = bound.is;
        q = q.where((eb) => (is === null ? eb('capsule_id', 'is', null) : eb('capsule_id', '=', is)));
      } else if (bound) {
        const capsule = bound.freeFor;
        q = q.where((eb) => eb.or([eb('capsule_id', 'is', null), eb('capsule_id', '=', capsule)]));
      }
      const r = await q.executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },
  };
}

export function workflowAnswer(row: WorkflowRow): WorkflowAnswer {
  const map = JSON.parse(row.map) as WorkflowMap;
  return {
    entity_id: row.entity_id,
    workflow_id: row.workflow_id,
    pack_id: row.pack_id,
    state: row.state,
    next_states: map.edges[row.state] ?? [],
    capsule_id: row.capsule_id,
    map,
    history: JSON.parse(row.history),
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

const invalid = (row: WorkflowRow, to: string, why: string) => {
  const next = (JSON.parse(row.map) as WorkflowMap).edges[row.state] ?? [];
  return flowError.workflowInvalidTransition(
    `workflow ${row.workflow_id} is ${row.state} and cannot move to ${to}: ${why}`,
    'to',
    next.length > 0 ? `legal next states: ${next.join(', ')}` : `${row.state} is final: no next state`,
  );
};

type Caller = Pick<OrgScope, 'organizationId' | 'projectId' | 'principal'>;

/**
 * Whether a caller may see a workflow: a person sees the organization's, an API key its own
 * project's only (as with capsules).
 */
export const visibleTo = (scope: Caller, row: Pick<WorkflowRow, 'project_id'>): boolean =>
  scope.principal.kind !== 'apiKey' || row.project_id === scope.projectId;

const actor = (scope: Caller) =>
  scope.principal.kind === 'user' ? `user:${scope.principal.userId}` : `key:${scope.principal.keyId}`;

export interface WorkflowDeps {
  store: Db;
  clock: Clock;
  /** The pack content a workflow created under `pack_id` takes its map from. */
  packContent(org: string, packId: string): Promise<PackContent>;
}

/** Workflows per (organization, entity, workflow_id): create, read, move along the map. */
export function createWorkflowService(deps: WorkflowDeps) {
  const repo = createWorkflowRepository(deps.store);
  const now = () => deps.clock.now().toISOString();

  /** A workflow as its caller may see it: an API key sees its own project's workflows only. */
  async function find(scope: Caller, entityId: string, workflowId: string): Promise<WorkflowRow> {
    const row = await repo.get(scope.organizationId, entityId, workflowId);
    if (!row || !visibleTo(scope, row)) {
      throw flowError.workflowNotFound(
        `workflow ${workflowId} of entity ${entityId} not found`,
        'workflow_id',
      );
    }
    return row;
  }

  return {
    find,

    async create(
      scope: Caller,
      input: { entity_id: string; workflow_id: string; pack_id?: string },
    ): Promise<WorkflowAnswer> {
      checkEntityId(input.entity_id);
      const map =
        input.pack_id !== undefined
          ? mapOfPack(await deps.packContent(scope.organizationId, input.pack_id))
          : DEFAULT_WORKFLOW_MAP;
      const at = now();
      const row: WorkflowRow = {
        organization_id: scope.organizationId,
        entity_id: input.entity_id,
        workflow_id: input.workflow_id,
        project_id: scope.projectId,
        pack_id: input.pack_id ?? null,
        map: JSON.stringify(map),
        state: map.initial,
        capsule_id: null,
        history: JSON.stringify([{ from: null, to: map.initial, at, by: actor(scope), reason: null }]),
        created_at: at,
        updated_at: at,
      };
      if (!(await repo.insert(row))) {
        throw flowError.workflowAlreadyExists(
          `workflow ${input.workflow_id} of entity ${input.entity_id} already exists`,
          'workflow_id',
        );
      }
      return workflowAnswer(row);
    },

    async get(scope: Caller, entityId: string, workflowId: string): Promise<WorkflowAnswer> {
      return workflowAnswer(await find(scope, entityId, workflowId));
    },

    /**
     * Moves a workflow along its map. The consume edge is the gateway's own (a capsule's consume
     * takes it); states of `person_states` are entered by a person only.
     */
    async transition(
      scope: Caller,
      entityId: string,
      workflowId: string,
      input: { to: string; reason?: string },
    ): Promise<WorkflowAnswer> {
      const row = await find(scope, entityId, workflowId);
      const map = JSON.parse(row.map) as WorkflowMap;
      const next = map.edges[row.state] ?? [];
      if (!next.includes(input.to)) throw invalid(row, input.to, `${input.to} is not a legal next state`);
      if (row.state === map.consume_from && input.to === map.consume_to) {
        throw invalid(
          row,
          input.to,
          `${map.consume_to} is reached by consuming a capsule bound to the workflow`,
        );
      }
      if (row.capsule_id !== null && row.state === map.consume_from) {
        throw invalid(row, input.to, `capsule ${row.capsule_id} is paying it`);
      }
      if (map.person_states.includes(input.to) && scope.principal.kind !== 'user') {
        throw gatewayError.forbidden(
          `moving a workflow to ${input.to} takes a person (user token), not an API key`,
        );
      }
      const entry = {
        from: row.state,
        to: input.to,
        at: now(),
        by: actor(scope),
        reason: input.reason ?? null,
      };
      // Written only over the state and the capsule binding checked above: a consume that bound the
      // workflow meanwhile (its payment may be with the provider) keeps it.
      const bound = { is: row.capsule_id };
      // Back into the state a capsule pays it in (a map that loops, e.g. failed → approved): the
      // capsule that paid it before is done with it (a binding holds it only in consume_from, which
      // it left), so the next capsule may pay it and a person may move it on.
      const unbind = input.to === map.consume_from;
      if (!(await repo.move(scope.organizationId, row, row.state, input.to, entry, null, bound, unbind))) {
        const again = await find(scope, entityId, workflowId);
        if (again.state === row.state && again.capsule_id !== null && again.state === map.consume_from) {
          throw invalid(again, input.to, `capsule ${again.capsule_id} is paying it`);
        }
        throw invalid(again, input.to, 'it moved while this transition was made');
      }
      return workflowAnswer((await repo.get(scope.organizationId, entityId, workflowId))!);
    },
  };
}

export type WorkflowService = ReturnType<typeof createWorkflowService>;

/** A workflow's own map, stored when it was created (the pack it was created under may change). */
export const mapOfWorkflow = (row: Pick<WorkflowRow, 'map'>): WorkflowMap =>
  JSON.parse(row.map) as WorkflowMap;

/**
 * At consume, under the lock: the bound workflow must be in the consume state of its own map (the
 * one it was created with, whichever pack the capsule was minted under).
 */
export async function checkWorkflowForConsume(
  db: Db,
  org: string,
  entityId: string,
  workflowId: string,
  capsuleId: string,
  capsuleProject: string | null,
): Promise<WorkflowRow> {
  const row = await createWorkflowRepository(db).get(org, entityId, workflowId);
  // A capsule minted by a project's key pays only that project's workflows.
  if (!row || (capsuleProject !== null && row.project_id !== capsuleProject)) {
    throw flowError.workflowNotFound(`workflow ${workflowId} of entity ${entityId} not found`, 'workflow_id');
  }
  const map = mapOfWorkflow(row);
  if (row.state !== map.consume_from) {
    throw invalid(row, map.consume_to, `a capsule bound to it consumes only in state ${map.consume_from}`);
  }
  if (row.capsule_id !== null && row.capsule_id !== capsuleId) {
    throw invalid(row, map.consume_to, `capsule ${row.capsule_id} is paying it`);
  }
  return row;
}

/** Holds the workflow for a capsule whose payment is in flight (no other capsule may pay it). */
export async function holdWorkflow(db: Db, org: string, row: WorkflowRow, capsuleId: string, at: string) {
  const r = await view(db)
    .updateTable('gateway_workflows')
    .set({ capsule_id: capsuleId, updated_at: at })
    .where('organization_id', '=', org)
    .where('entity_id', '=', row.entity_id)
    .where('workflow_id', '=', row.workflow_id)
    .where('state', '=', row.state)
    .where((eb) => eb.or([eb('capsule_id', 'is', null), eb('capsule_id', '=', capsuleId)]))
    .executeTakeFirst();
  if (Number(r.numUpdatedRows) !== 1) throw invalid(row, row.state, 'another capsule is paying it');
}

/** Lets go of a workflow whose payment the provider refused for certain. */
export async function releaseWorkflow(
  db: Db,
  org: string,
  entityId: string,
  workflowId: string,
  capsuleId: string,
) {
  await view(db)
    .updateTable('gateway_workflows')
    .set({ capsule_id: null })
    .where('organization_id', '=', org)
    .where('entity_id', '=', entityId)
    .where('workflow_id', '=', workflowId)
    .where('capsule_id', '=', capsuleId)
    .execute();
}

/**
 * The consume's move (and, for a payment settled at consume, the settle move), in its transaction.
 * With `paid` (a provider already executed the payment) it never refuses: a workflow no longer in
 * `consume_from`, or held by another capsule, keeps its state, and its history records that the
 * capsule's payment succeeded (money moved; the commit must record it).
 */
export async function moveWorkflowOnConsume(
  db: Db,
  org: string,
  row: WorkflowRow,
  capsuleId: string,
  settled: boolean,
  at: string,
  paid = false,
): Promise<void> {
  const repo = createWorkflowRepository(db);
  const map = mapOfWorkflow(row);
  const by = `capsule:${capsuleId}`;
  if (
    !(await repo.move(
      org,
      row,
      map.consume_from,
      map.consume_to,
      { from: map.consume_from, to: map.consume_to, at, by, reason: 'capsule consumed' },
      capsuleId,
      { freeFor: capsuleId },
    ))
  ) {
    if (!paid) throw invalid(row, map.consume_to, 'it moved while the capsule was consumed');
    const current = await repo.get(org, row.entity_id, row.workflow_id);
    if (!current) return;
    // Only a workflow that left consume_from (or was taken by another capsule) while this payment was
    // unresolved gets here, which holds prevent: the payment is recorded, the workflow not moved.
    await repo.move(
      org,
      current,
      current.state,
      current.state,
      {
        from: current.state,
        to: current.state,
        at,
        by,
        reason: `the payment of capsule ${capsuleId} succeeded while the workflow was not in ${map.consume_from} for it; its state is kept`,
      },
      null,
    );
    return;
  }
  if (settled && map.settle_to !== null) {
    const moved = (await repo.get(org, row.entity_id, row.workflow_id))!;
    await repo.move(
      org,
      moved,
      map.consume_to,
      map.settle_to,
      { from: map.consume_to, to: map.settle_to, at, by, reason: 'payment settled on the ledger rail' },
      capsuleId,
    );
  }
}
