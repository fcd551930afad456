import {
  checkPolicyDefinition,
  type PolicyDefinition,
  type QualityReport,
  scorePolicy,
} from '@svc/policy-engine';
import type { Kysely } from 'kysely';
import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import { AppError, invalid, notFound } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import { isUniqueViolation } from '../../storage/errors.js';
import type { Database } from '../../storage/schema.js';
import type { Judge } from '../llm-judge/model.js';
import type { ToolRepository } from '../tools/repository.js';
import { type Tool, toTool } from '../tools/service.js';
import type { PolicyCache } from './cache.js';
import {
  definitionColumns,
  newPolicyRow,
  type Policy,
  type PolicyInput,
  type PolicyVersion,
  patternCountProblem,
  policyEtag,
  policyEvent,
  toDefinition,
  toPolicy,
  toPolicyVersion,
} from './model.js';
import type { PolicyRepository, PolicyRow } from './repository.js';

export interface PolicyServiceDeps {
  db: Kysely<Database>;
  policies: PolicyRepository;
  tools: ToolRepository;
  cache: Pick<PolicyCache, 'invalidate'>;
  events: EventBus;
  clock: Clock;
  /** Which model provider would judge an llm policy, for the quality report. */
  judge: Pick<Judge, 'route'>;
}

/** A quality report; llm policies also say which provider would judge them and whether it is configured. */
export type PolicyQuality = QualityReport & {
  judge?: { provider: string | null; model: string | null; configured: boolean };
};

export const policyNotFound = (toolName: string) => notFound(`Policy for tool "${toolName}"`);

/** Hard problems make a policy unwritable; the message lists every one so the caller fixes them at once. */
function assertWritable(toolName: string, def: PolicyDefinition): void {
  const tooMany = patternCountProblem(def);
  const problems = tooMany ? [tooMany] : checkPolicyDefinition(def);
  if (problems.length > 0) {
    throw invalid(`The policy for "${toolName}" cannot be saved: ${problems.join(' ')}`);
  }
}

/**
 * If-Match: the policy must still be the version the caller read, its ETag `expected` (none given:
 * no precondition); otherwise 409 conflict, `outcome` saying what was not done.
 */
function assertEtag(toolName: string, row: PolicyRow, expected: string | undefined, outcome: string): void {
  if (expected === undefined || policyEtag(row) === expected) return;
  throw new AppError(
    'conflict',
    `The policy for "${toolName}" changed since the version in If-Match was read (it is now version ${row.version}); ${outcome}. Read it again and decide on what it says now`,
  );
}

/** A policy as read or written, with the ETag of its version (sent as a header, not in the body). */
export type Tagged<T> = T & { etag: string };

export function createPolicyService({ db, policies, tools, cache, events, clock, judge }: PolicyServiceDeps) {
  async function registeredTool(scope: OrgScope, toolName: string): Promise<Tool | null> {
    const row = await tools.get(scope.organizationId, toolName);
    return row ? toTool(row) : null;
  }

  async function quality(scope: OrgScope, toolName: string, def: PolicyDefinition): Promise<PolicyQuality> {
    const report = scorePolicy(def, await registeredTool(scope, toolName));
    if (def.mode !== 'llm') return report;
    const route = judge.route(def.llmConfig?.preferredModel ?? null);
    const issues = [...report.issues];
    const preferred = def.llmConfig?.preferredModel;
    if (!route.configured) {
      issues.push(
        'No model provider is configured, so every call under this policy is denied (fail closed).',
      );
    } else if (preferred && route.provider !== preferred) {
      issues.push(
        `The preferred provider "${preferred}" is not configured; "${route.provider}" would judge instead.`,
      );
    }
    return { ...report, issues, judge: route };
  }

  /**
   * If-Match before a write: the policy as read, once its ETag is `expected` (404 when there is no
   * policy, 409 conflict when it is another version), for the write to be conditioned on; undefined
   * without a precondition.
   */
  async function checked(
    scope: OrgScope,
    toolName: string,
    expected: string | undefined,
    outcome: string,
  ): Promise<PolicyRow | undefined> {
    if (expected === undefined) return undefined;
    const row = await policies.get(scope.organizationId, toolName);
    if (!row) throw policyNotFound(toolName);
    assertEtag(toolName, row, expected, outcome);
    return row;
  }

  /**
   * A conditional write that matched no row: the policy was deleted (the caller answers 404) or
   * written since it was checked (409 conflict).
   */
  async function settleMiss(
    scope: OrgScope,
    toolName: string,
    expected: string | undefined,
    outcome: string,
  ): Promise<void> {
    if (expected === undefined) return;
    const now = await policies.get(scope.organizationId, toolName);
    if (!now) return;
    assertEtag(toolName, now, expected, outcome);
    throw new AppError(
      'conflict',
      `The policy for "${toolName}" changed while it was being written; ${outcome}. Read it again and retry`,
    );
  }

  /** Runs after the write committed: other readers must never see the old policy after the answer. */
  function written(scope: OrgScope, toolName: string): void {
    cache.invalidate(scope.organizationId, toolName);
  }

  return {
    async list(scope: OrgScope): Promise<Policy[]> {
      return (await policies.list(scope.organizationId)).map(toPolicy);
    },

    async get(scope: OrgScope, toolName: string): Promise<Tagged<Policy & { tool: Tool | null }>> {
      const row = await policies.get(scope.organizationId, toolName);
      if (!row) throw policyNotFound(toolName);
      return { ...toPolicy(row), tool: await registeredTool(scope, toolName), etag: policyEtag(row) };
    },

    async create(
      scope: OrgScope,
      input: PolicyInput & { toolName: string },
    ): Promise<Tagged<Policy & { quality: PolicyQuality }>> {
      const def = toDefinition(input);
      assertWritable(input.toolName, def);
      const row = newPolicyRow(scope, input.toolName, def, clock.now().toISOString());
      try {
        await policies.insert(row);
      } catch (err) {
        if (!isUniqueViolation(err)) throw err;
        throw new AppError(
          'policy_exists',
          `A policy for tool "${input.toolName}" already exists; change it with PUT /v1/policies/:toolName`,
        );
      }
      written(scope, input.toolName);
      events.publish(policyEvent(scope, 'policy.created', input.toolName));
      return { ...toPolicy(row), quality: await quality(scope, input.toolName, def), etag: policyEtag(row) };
    },

    /**
     * Replaces the whole definition; the version is bumped in the same statement, activity is kept.
     * With `expected` (If-Match) only over the version with that ETag, up to the write.
     */
    async update(
      scope: OrgScope,
      toolName: string,
      input: PolicyInput,
      expected?: string,
    ): Promise<Tagged<Policy & { quality: PolicyQuality }>> {
      const def = toDefinition(input);
      assertWritable(toolName, def);
      const patch = {
        ...definitionColumns(def),
        project_id: scope.projectId,
        updated_at: clock.now().toISOString(),
      };
      const outcome = 'nothing was changed';
      const state = await checked(scope, toolName, expected, outcome);
      // With If-Match, written only while the policy is still what was checked.
      const row = await db
        .transaction()
        .execute((trx) => policies.replace(scope.organizationId, toolName, patch, trx, state));
      if (!row) {
        await settleMiss(scope, toolName, expected, outcome);
        throw policyNotFound(toolName);
      }
      written(scope, toolName);
      events.publish(policyEvent(scope, 'policy.updated', toolName, { version: row.version }));
      return { ...toPolicy(row), quality: await quality(scope, toolName, def), etag: policyEtag(row) };
    },

    /** With `expected` (If-Match), deletes only the version with that ETag, up to the write. */
    async delete(scope: OrgScope, toolName: string, expected?: string): Promise<void> {
      const outcome = 'it was not deleted';
      const state = await checked(scope, toolName, expected, outcome);
      if (!(await policies.delete(scope.organizationId, toolName, undefined, state))) {
        await settleMiss(scope, toolName, expected, outcome);
        throw policyNotFound(toolName);
      }
      written(scope, toolName);
      events.publish(policyEvent(scope, 'policy.deleted', toolName));
    },

    /**
     * Idempotent: activating an active policy succeeds and still announces the state. With
     * `expected` (If-Match), only while the policy is the version with that ETag, up to the write.
     */
    async setActive(scope: OrgScope, toolName: string, active: boolean, expected?: string): Promise<string> {
      const at = clock.now().toISOString();
      const outcome = `it was not ${active ? 'activated' : 'deactivated'}`;
      const state = await checked(scope, toolName, expected, outcome);
      const org = scope.organizationId;
      if (!(await policies.setActive(org, toolName, active, at, scope.projectId, state))) {
        await settleMiss(scope, toolName, expected, outcome);
        throw policyNotFound(toolName);
      }
      written(scope, toolName);
      events.publish(policyEvent(scope, active ? 'policy.activated' : 'policy.deactivated', toolName));
      return `Policy for tool "${toolName}" ${active ? 'activated' : 'deactivated'}`;
    },

    /** Every recorded version, newest first (a policy deleted and created again keeps its old versions). */
    async versions(scope: OrgScope, toolName: string): Promise<PolicyVersion[]> {
      const rows = await policies.versions(scope.organizationId, toolName);
      if (rows.length === 0) throw policyNotFound(toolName);
      return rows.map(toPolicyVersion);
    },

    /** One version; with several incarnations of that number, the newest, or the one with `policyHash`. */
    async version(
      scope: OrgScope,
      toolName: string,
      version: number,
      policyHash?: string,
    ): Promise<PolicyVersion> {
      const rows = await policies.versions(scope.organizationId, toolName, version);
      const row = policyHash ? rows.find((r) => r.policy_hash === policyHash) : rows[0];
      if (!row) throw notFound(`Version ${version} of the policy for tool "${toolName}"`);
      return toPolicyVersion(row);
    },

    /** Dry run: nothing is read from or written to the policy; hard problems are reported as issues. */
    async validate(scope: OrgScope, toolName: string, input: PolicyInput): Promise<PolicyQuality> {
      const def = toDefinition(input);
      // Not scored: scoring compiles every pattern.
      const tooMany = patternCountProblem(def);
      if (tooMany) return { valid: false, score: 0, issues: [tooMany] };
      return quality(scope, toolName, def);
    },
  };
}

export type PolicyService = ReturnType<typeof createPolicyService>;
