import type { Static } from '@sinclair/typebox';
import type {
  Constraint,
  LlmConfig,
  PolicyDefinition,
  PolicyMode,
  SessionConstraints,
} from '@svc/policy-engine';
import type { ServiceEvent } from '../../events/bus.js';
import { hashJson } from '../../ledger/canonical.js';
import type { OrgScope } from '../../lib/scope.js';
import { definitionOf } from './cache.js';
import type { PolicyRow, PolicyState, PolicyVersionRow } from './repository.js';
import type { UpdatePolicyBody } from './schemas.js';

/** A policy as the API shows it. */
export interface Policy {
  toolName: string;
  version: number;
  isActive: boolean;
  mode: PolicyMode;
  constraints: Constraint[];
  sessionConstraints: SessionConstraints | null;
  llmConfig: LlmConfig | null;
  createdAt: string;
  updatedAt: string;
}

export type PolicyInput = Static<typeof UpdatePolicyBody>;

/**
 * A copy without null-valued object fields, at any depth: the spec's "?" means optional or null, and
 * "not set" is then stored and validated one way only. Null array elements are kept (and rejected).
 */
export function dropNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropNulls);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, dropNulls(v)]),
  );
}

/**
 * An LLM config as the spec shows it: `exceptions` is always a list (SPEC section 2), `[]` when none
 * were given. Written that way, and read that way for policies stored before it was.
 */
export function withExceptions(config: LlmConfig | null | undefined): LlmConfig | null {
  if (!config) return null;
  return Array.isArray(config.exceptions) ? config : { ...config, exceptions: [] };
}

/**
 * The most patterns (`regex` and `notRegex`, enabled or not) one policy may hold. Each is compiled
 * ahead of its searches, up to about 50 ms of work, at every write and at every instance's first
 * check after a change: within the body limit thousands would fit, and would hold the process for
 * minutes each time.
 */
export const MAX_POLICY_PATTERNS = 64;

/** Why a definition holds too many patterns to be compiled, or null; checked before any is compiled. */
export function patternCountProblem(def: Pick<PolicyDefinition, 'constraints'>): string | null {
  let n = 0;
  for (const c of Array.isArray(def.constraints) ? def.constraints : []) {
    if (typeof c !== 'object' || c === null) continue;
    if (c.regex !== undefined && c.regex !== null) n++;
    if (c.notRegex !== undefined && c.notRegex !== null) n++;
  }
  if (n <= MAX_POLICY_PATTERNS) return null;
  return `A policy may hold at most ${MAX_POLICY_PATTERNS} patterns (regex and notRegex together); this one holds ${n}.`;
}

/**
 * The stored form of a body: deterministic mode and enabled constraints unless said otherwise. A PUT
 * replaces the whole definition, so an omitted field resets to its default.
 */
export function toDefinition(input: PolicyInput): PolicyDefinition {
  return {
    mode: input.mode ?? 'deterministic',
    constraints: (input.constraints ?? []).map((c) => ({ ...c, enabled: c.enabled ?? true })),
    sessionConstraints: input.sessionConstraints ?? null,
    llmConfig: withExceptions(input.llmConfig),
  };
}

export function toPolicy(row: PolicyRow): Policy {
  const def = definitionOf(row);
  return {
    toolName: row.tool_name,
    version: row.version,
    isActive: row.is_active === 1,
    mode: def.mode,
    constraints: def.constraints ?? [],
    sessionConstraints: def.sessionConstraints ?? null,
    // Not in definitionOf: a stored definition is what its policy_hash covers, and stays as stored.
    llmConfig: withExceptions(def.llmConfig),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/**
 * The entity tag of a policy's current version (without the quotes of the header): `v<version>-`
 * and 32 hex digits of the SHA-256 of the version, the policy_hash of its definition and its
 * creation time. A policy deleted and created again starts at version 1 again: its creation time
 * (and mostly its definition) tell the incarnations apart, so an old tag never matches the new
 * one. Activating and deactivating change neither the version nor the tag.
 */
export function policyEtag(row: PolicyState): string {
  const digest = hashJson({
    version: row.version,
    policyHash: hashJson(definitionOf(row)),
    createdAt: row.created_at,
  });
  return `v${row.version}-${digest.slice('sha256:'.length, 'sha256:'.length + 32)}`;
}

/** A new policy row: version 1, active. */
export function newPolicyRow(
  scope: OrgScope,
  toolName: string,
  def: PolicyDefinition,
  now: string,
): PolicyRow {
  return {
    organization_id: scope.organizationId,
    tool_name: toolName,
    project_id: scope.projectId,
    version: 1,
    is_active: 1,
    ...definitionColumns(def),
    created_at: now,
    updated_at: now,
  };
}

export function definitionColumns(
  def: PolicyDefinition,
): Pick<PolicyRow, 'mode' | 'constraints' | 'session_constraints' | 'llm_config'> {
  return {
    mode: def.mode,
    constraints: JSON.stringify(def.constraints ?? []),
    session_constraints: def.sessionConstraints ? JSON.stringify(def.sessionConstraints) : null,
    llm_config: def.llmConfig ? JSON.stringify(def.llmConfig) : null,
  };
}

export type PolicyEventType =
  | 'policy.created'
  | 'policy.updated'
  | 'policy.activated'
  | 'policy.deactivated'
  | 'policy.deleted';

/** A catalog A policy event; projectId is the acting key's project (null for users). */
export function policyEvent(
  scope: OrgScope,
  type: PolicyEventType,
  toolName: string,
  extra: Record<string, unknown> = {},
): ServiceEvent {
  return {
    organizationId: scope.organizationId,
    type,
    data: { toolName, projectId: scope.projectId, ...extra },
  };
}

/** A past (or the current) definition of a policy, as receipts name it by version and policy_hash. */
export interface PolicyVersion {
  toolName: string;
  version: number;
  policyHash: string;
  definition: PolicyDefinition;
  createdAt: string;
}

export function toPolicyVersion(row: PolicyVersionRow): PolicyVersion {
  return {
    toolName: row.tool_name,
    version: row.version,
    policyHash: row.policy_hash,
    definition: definitionOf(row),
    createdAt: row.created_at,
  };
}
