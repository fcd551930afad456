import type { Kysely } from 'kysely';
import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import { AppError, forbidden, invalid, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Database } from '../../storage/schema.js';
import type { PolicyCache } from '../policies/cache.js';
import { policyEvent } from '../policies/model.js';
import type { PolicyRepository } from '../policies/repository.js';
import { type AppliedPolicy, applyDraftRules, type SkippedDraftRule } from './apply.js';
import {
  assertRules,
  type DraftRuleInput,
  type DraftStatus,
  draftRevision,
  type PolicyDraft,
  toDraft,
} from './model.js';
import type { DraftPatch, DraftRepository, DraftRow } from './repository.js';

/**
 * If-Match: the draft must still be the revision the caller read (none given: no precondition);
 * otherwise 409 conflict, `outcome` saying what was not done.
 */
function assertRevision(row: DraftRow, expected: string | undefined, outcome: string): void {
  if (expected !== undefined && draftRevision(row) !== expected) {
    throw new AppError(
      'conflict',
      `The draft was edited since the revision in If-Match was read; ${outcome}. Read it again and review what it says now`,
    );
  }
}

export interface DraftServiceDeps {
  db: Kysely<Database>;
  drafts: DraftRepository;
  policies: PolicyRepository;
  cache: Pick<PolicyCache, 'invalidate'>;
  events: EventBus;
  clock: Clock;
  projectExists: (organizationId: string, projectId: string) => Promise<boolean>;
}

export interface CreateDraftInput {
  name: string;
  description?: string;
  projectId: string;
  createdByAgentId: string;
  rules: DraftRuleInput[];
}

export interface DraftChanges {
  name?: string;
  description?: string;
  rules?: DraftRuleInput[];
  status?: DraftStatus;
}

/** Who reviewed: the user, or the API key (`apikey:<keyId>`) where the route accepts keys. */
function reviewer(scope: OrgScope): string {
  const p = scope.principal;
  return p.kind === 'user' ? p.userId : `apikey:${p.keyId}`;
}

/**
 * Status moves PATCH allows besides keeping the status: only withdrawing a submitted draft
 * (pending_review → draft). Submit, approve and reject have their own endpoints (and events);
 * approved and rejected drafts are final.
 */
function patchMoveProblem(from: DraftStatus, to: DraftStatus): string | null {
  if (from === to || (from === 'pending_review' && to === 'draft')) return null;
  if (from === 'approved' || from === 'rejected')
    return `an ${from} draft is final; its status cannot change`;
  const endpoint = { pending_review: 'submit', approved: 'approve', rejected: 'reject', draft: null }[to];
  return `status ${from} cannot become ${to} through PATCH; use POST /v1/policy-drafts/:id/${endpoint}`;
}

export function createDraftService(deps: DraftServiceDeps) {
  const { db, drafts, policies, cache, events, clock, projectExists } = deps;
  const now = () => clock.now().toISOString();

  async function load(scope: OrgScope, id: string): Promise<DraftRow> {
    const row = await drafts.get(scope.organizationId, id);
    if (!row) throw notFound('Policy draft');
    return row;
  }

  /**
   * A status move guarded by the status it starts from, and by the revision the caller read when it
   * gives one (checked on the moved row, in its transaction: a stale one rolls the move back);
   * explains a miss (404 or 400).
   */
  async function move(
    scope: OrgScope,
    id: string,
    from: DraftStatus,
    patch: DraftPatch,
    verb: string,
    expectedRevision: string | undefined,
  ) {
    const row = await db.transaction().execute(async (trx) => {
      const moved = await drafts.updateIf(scope.organizationId, id, from, patch, trx);
      if (moved) assertRevision(moved, expectedRevision, `it was not ${verb}`);
      return moved;
    });
    if (row) return row;
    const current = await load(scope, id);
    throw invalid(`Only a draft in status ${from} can be ${verb}; this one is ${current.status}`);
  }

  return {
    async create(scope: OrgScope, input: CreateDraftInput): Promise<PolicyDraft> {
      assertRules(input.rules);
      if (!(await projectExists(scope.organizationId, input.projectId))) throw notFound('Project');
      const at = now();
      const row: DraftRow = {
        id: uuidv7(),
        organization_id: scope.organizationId,
        project_id: input.projectId,
        name: input.name,
        description: input.description ?? '',
        status: 'draft',
        created_by_agent_id: input.createdByAgentId,
        rules: JSON.stringify(input.rules),
        reviewed_by: null,
        reviewed_at: null,
        created_at: at,
        updated_at: at,
        created_by_key_id: scope.principal.kind === 'apiKey' ? scope.principal.keyId : null,
        created_by_lineage_id: scope.principal.kind === 'apiKey' ? scope.principal.lineageId : null,
      };
      await drafts.insert(row);
      return toDraft(row);
    },

    async list(
      scope: OrgScope,
      filter: { projectId?: string; status?: DraftStatus },
    ): Promise<PolicyDraft[]> {
      return (await drafts.list(scope.organizationId, filter)).map(toDraft);
    },

    async get(scope: OrgScope, id: string): Promise<PolicyDraft> {
      return toDraft(await load(scope, id));
    },

    /**
     * Content (name, description, rules) is editable only in status draft; see patchMoveProblem.
     * With `expectedRevision` (If-Match) the draft must still be that revision, up to the write.
     */
    async update(
      scope: OrgScope,
      id: string,
      changes: DraftChanges,
      expectedRevision?: string,
    ): Promise<PolicyDraft> {
      if (changes.rules) assertRules(changes.rules);
      const row = await load(scope, id);
      assertRevision(row, expectedRevision, 'nothing was changed');
      const from = row.status as DraftStatus;
      const to = changes.status ?? from;
      const problem = patchMoveProblem(from, to);
      if (problem) throw invalid(problem);
      const edits =
        changes.name !== undefined || changes.description !== undefined || changes.rules !== undefined;
      if (edits && to !== 'draft') {
        throw invalid(
          `A draft in status ${from} cannot be edited; only status draft can (withdraw a submitted draft with {"status": "draft"})`,
        );
      }
      // No key approves what it wrote: the key that created a draft never approves it, so no other
      // key may write into it (a key may hold policy-drafts:approve). People may edit any draft.
      const p = scope.principal;
      if (edits && p.kind === 'apiKey' && row.created_by_key_id !== p.keyId) {
        throw forbidden(
          'An API key edits only the policy drafts it created (withdrawing another key’s draft is allowed)',
        );
      }
      // Restating the current status changes nothing, so nothing is written.
      if (!edits && to === from) return toDraft(row);
      const patch: DraftPatch = {
        ...(changes.name !== undefined ? { name: changes.name } : {}),
        ...(changes.description !== undefined ? { description: changes.description } : {}),
        ...(changes.rules !== undefined ? { rules: JSON.stringify(changes.rules) } : {}),
        status: to,
        updated_at: now(),
      };
      // With If-Match, written only over the content whose revision was checked above.
      const same = expectedRevision === undefined ? undefined : row;
      const updated = await drafts.updateIf(scope.organizationId, id, from, patch, db, same);
      if (updated) return toDraft(updated);
      assertRevision(await load(scope, id), expectedRevision, 'nothing was changed');
      throw new AppError('conflict', 'The draft changed while it was being updated; read it again and retry');
    },

    /** With `expectedRevision` (If-Match), deletes only the revision the caller read. */
    async delete(scope: OrgScope, id: string, expectedRevision?: string): Promise<void> {
      if (expectedRevision === undefined) {
        if (!(await drafts.delete(scope.organizationId, id))) throw notFound('Policy draft');
        return;
      }
      const row = await load(scope, id);
      assertRevision(row, expectedRevision, 'it was not deleted');
      if (await drafts.delete(scope.organizationId, id, row)) return;
      // Deleted (404) or edited (409) since it was read.
      assertRevision(await load(scope, id), expectedRevision, 'it was not deleted');
      throw new AppError('conflict', 'The draft changed while it was being deleted; read it again and retry');
    },

    async submit(scope: OrgScope, id: string, expectedRevision?: string): Promise<PolicyDraft> {
      const patch = { status: 'pending_review', updated_at: now() };
      const row = await move(scope, id, 'draft', patch, 'submitted', expectedRevision);
      events.publish({
        organizationId: scope.organizationId,
        type: 'draft.submitted',
        data: { draftId: id, orgId: scope.organizationId, revision: draftRevision(row) },
      });
      return toDraft(row);
    },

    async reject(scope: OrgScope, id: string, expectedRevision?: string): Promise<PolicyDraft> {
      const at = now();
      const patch = { status: 'rejected', reviewed_by: reviewer(scope), reviewed_at: at, updated_at: at };
      const row = await move(scope, id, 'pending_review', patch, 'rejected', expectedRevision);
      events.publish({ organizationId: scope.organizationId, type: 'draft.rejected', data: { draftId: id } });
      return toDraft(row);
    },

    /**
     * Approves and applies in ONE transaction: the status change and every policy write commit
     * together or not at all. Caches are invalidated and events sent only after COMMIT.
     */
    async approve(
      scope: OrgScope,
      id: string,
      /** The revision the reviewer read (If-Match): anything else is not applied. */
      expectedRevision?: string,
    ): Promise<{ data: PolicyDraft; applied: AppliedPolicy[]; skipped: SkippedDraftRule[] }> {
      const p = scope.principal;
      if (p.kind === 'apiKey') {
        if (!p.scopes.includes('policy-drafts:approve')) {
          throw forbidden(
            'Approving a draft needs a user token, or an API key with the policy-drafts:approve scope',
          );
        }
        // The creator's key and lineage never change, so reading them before the guarded update is enough.
        const created = await load(scope, id);
        if (created.created_by_key_id === p.keyId) {
          throw forbidden('an API key cannot approve a policy draft it created');
        }
        if ((created.created_by_lineage_id ?? created.created_by_key_id) === p.lineageId) {
          throw forbidden(
            'an API key cannot approve a policy draft a key of its lineage created (the key that minted it, or one minted by it or by the same key)',
          );
        }
        // A key relays a person's click on what it showed them: it must say which revision that was,
        // or a draft rewritten meanwhile would be applied unseen. (A user token may omit it, as the
        // spec's approve has no precondition; the dashboard always sends it.)
        if (expectedRevision === undefined) {
          throw invalid(
            'An API key approves a draft only with If-Match: the revision it showed (the ETag of GET /v1/policy-drafts/:id)',
          );
        }
      }
      const at = now();
      const patch = { status: 'approved', reviewed_by: reviewer(scope), reviewed_at: at, updated_at: at };
      const result = await db.transaction().execute(async (trx) => {
        const row = await drafts.updateIf(scope.organizationId, id, 'pending_review', patch, trx);
        if (!row) return null;
        // Checked on the row the status move returned, in its transaction: throwing rolls it back.
        assertRevision(row, expectedRevision, 'nothing was applied');
        const owner = { ...scope, projectId: row.project_id };
        return { row, ...(await applyDraftRules(trx, policies, owner, JSON.parse(row.rules), at)) };
      });
      if (!result) {
        const current = await load(scope, id);
        throw invalid(`Only a draft in status pending_review can be approved; this one is ${current.status}`);
      }
      const owner = { ...scope, projectId: result.row.project_id };
      for (const p of result.applied) {
        cache.invalidate(scope.organizationId, p.toolName);
        events.publish(
          p.created
            ? policyEvent(owner, 'policy.created', p.toolName)
            : policyEvent(owner, 'policy.updated', p.toolName, { version: p.version }),
        );
        // Approving rules into an inactive policy enforces it again: say so as activating it would.
        if (p.activated) events.publish(policyEvent(owner, 'policy.activated', p.toolName));
      }
      events.publish({ organizationId: scope.organizationId, type: 'draft.approved', data: { draftId: id } });
      // `activated` said what to publish; the answer lists what was applied.
      const applied = result.applied.map(({ activated: _, ...a }) => a);
      return { data: toDraft(result.row), applied, skipped: result.skipped };
    },
  };
}

export type DraftService = ReturnType<typeof createDraftService>;
