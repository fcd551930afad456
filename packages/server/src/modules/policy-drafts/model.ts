import type { Static } from '@sinclair/typebox';
import {
  compileDraftRules,
  DRAFT_OPERATORS,
  type DraftOperator,
  type DraftRule,
  PATTERN_OPERATORS,
} from '@svc/policy-engine';
import { hashJson } from '../../ledger/canonical.js';
import { invalid } from '../../lib/errors.js';
import { MAX_POLICY_PATTERNS, patternCountProblem } from '../policies/model.js';
import type { DraftRow } from './repository.js';
import type { DraftRuleSchema } from './schemas.js';

/** A draft rule as stored and shown (SPEC §2); compileDraftRules reads the same shape. */
export type DraftRuleInput = Static<typeof DraftRuleSchema>;

export const DRAFT_STATUSES = ['draft', 'pending_review', 'approved', 'rejected'] as const;
export type DraftStatus = (typeof DRAFT_STATUSES)[number];

export interface PolicyDraft {
  id: string;
  organizationId: string;
  projectId: string;
  name: string;
  description: string;
  status: DraftStatus;
  createdByAgentId: string;
  rules: DraftRuleInput[];
  createdAt: string;
  updatedAt: string;
  reviewedBy: string | null;
  reviewedAt: string | null;
  /**
   * What a reviewer reads, as one value: a hash of the project, name, description and rules. It
   * changes with every edit and only then (status moves keep it), so approving with the revision
   * one read applies exactly what one read.
   */
  revision: string;
}

/** The draft's revision (PolicyDraft.revision) from its stored columns. */
export function draftRevision(row: Pick<DraftRow, 'project_id' | 'name' | 'description' | 'rules'>): string {
  return hashJson({
    projectId: row.project_id,
    name: row.name,
    description: row.description,
    rules: JSON.parse(row.rules),
  });
}

export function toDraft(row: DraftRow): PolicyDraft {
  return {
    id: row.id,
    organizationId: row.organization_id,
    projectId: row.project_id,
    name: row.name,
    description: row.description,
    status: row.status as DraftStatus,
    createdByAgentId: row.created_by_agent_id,
    rules: JSON.parse(row.rules),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    reviewedBy: row.reviewed_by,
    reviewedAt: row.reviewed_at,
    revision: draftRevision(row),
  };
}

/**
 * What the schema cannot say: rule ids are unique within a draft (skipped rules are reported by
 * id) and operators are ones the compiler knows, so an agent learns of a typo when it writes the
 * draft rather than when a human approves it. 400 naming the field.
 */
export function assertRules(rules: DraftRuleInput[]): void {
  const seen = new Map<string, number>();
  rules.forEach((rule, i) => {
    const first = seen.get(rule.id);
    if (first !== undefined)
      throw invalid(`body/rules/${i}/id "${rule.id}" is already the id of body/rules/${first}`);
    seen.set(rule.id, i);
    rule.conditions.forEach((c, j) => {
      if (!(DRAFT_OPERATORS as readonly string[]).includes(c.operator)) {
        throw invalid(
          `body/rules/${i}/conditions/${j}/operator "${c.operator}" is not supported (supported: ${DRAFT_OPERATORS.join(', ')})`,
        );
      }
    });
  });
  assertPatternCounts(rules);
}

/**
 * Rules that alone give a tool more patterns than a policy may hold (MAX_POLICY_PATTERNS) could never
 * be applied, since approving only adds them to the tool's policy: 400 naming the tools. Counted
 * first without compiling (each pattern condition of an enabled rule, per tool it names: no fewer
 * than compiling keeps, which drops duplicates and skipped rules); only rules past the limit by that
 * count are compiled for the exact one. Approval counts again, with the tool's policy.
 */
function assertPatternCounts(rules: DraftRuleInput[]): void {
  const bound = new Map<string, number>();
  for (const rule of rules) {
    if (rule.enabled === false) continue;
    const n = rule.conditions.filter((c) => PATTERN_OPERATORS.has(c.operator as DraftOperator)).length;
    if (n === 0) continue;
    for (const tool of new Set(rule.tools)) bound.set(tool, (bound.get(tool) ?? 0) + n);
  }
  if (![...bound.values()].some((n) => n > MAX_POLICY_PATTERNS)) return;
  const problems: string[] = [];
  for (const { toolName, constraints } of compileDraftRules(rules as DraftRule[]).policies) {
    const tooMany = patternCountProblem({ constraints });
    if (tooMany) problems.push(`tool "${toolName}": ${tooMany}`);
  }
  if (problems.length > 0) {
    throw invalid(
      `body/rules give a tool more patterns than its policy may hold, so they could never be applied: ${problems.join(' ')}`,
    );
  }
}
