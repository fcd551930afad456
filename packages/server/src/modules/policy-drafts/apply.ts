import {
  type Constraint,
  checkPolicyDefinition,
  compileDraftRules,
  type DraftRule,
  type PolicyDefinition,
  type SkippedRule,
} from '@svc/policy-engine';
import type { Transaction } from 'kysely';
import { AppError, invalid } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Database } from '../../storage/schema.js';
import { definitionOf } from '../policies/cache.js';
import { definitionColumns, newPolicyRow, patternCountProblem } from '../policies/model.js';
import type { PolicyRepository, PolicyRow } from '../policies/repository.js';

export interface AppliedPolicy {
  toolName: string;
  version: number;
  created: boolean;
  /** An inactive policy the rules were added to, active again: an event, left out of the answer. */
  activated?: boolean;
}

/** A rule not applied; `toolName` is set when the rule was skipped for that tool only. */
export type SkippedDraftRule = SkippedRule & { toolName?: string };

/** Ids of the enabled rules that name the tool, for reporting a tool that was not changed. */
function ruleIdsFor(rules: DraftRule[], toolName: string, skipped: SkippedRule[]): string[] {
  const already = new Set(skipped.map((s) => s.ruleId));
  return rules
    .filter((r) => r && Array.isArray(r.tools) && r.tools.includes(toolName) && !already.has(r.id))
    .map((r) => r.id);
}

/**
 * The definition a draft's constraints make of a tool's policy. A draft never weakens a policy:
 * its constraints are appended to the existing ones (the engine checks every constraint of an
 * argument), and session limits and the LLM config are kept. The mode stays deterministic.
 */
function mergedDefinition(existing: PolicyRow | undefined, constraints: Constraint[]): PolicyDefinition {
  const kept = existing ? definitionOf(existing) : null;
  return {
    mode: 'deterministic',
    constraints: [...(kept?.constraints ?? []), ...constraints],
    sessionConstraints: kept?.sessionConstraints ?? null,
    llmConfig: kept?.llmConfig ?? null,
  };
}

/**
 * Writes the approvable rules of a draft as policies, inside the caller's transaction: one merged
 * constraint set per tool (compileDraftRules). A tool without a policy gets a new active
 * deterministic policy (version 1). An existing deterministic policy keeps its constraints, session
 * limits and LLM config, gets the draft's constraints appended and is made active (version + 1): an
 * approved draft is meant to be enforced, and never weakens what was enforced before. A tool whose
 * policy is in `llm` mode is left unchanged and reported in `skipped` (with `toolName`): its rules
 * would not be evaluated there. `scope.projectId` is the draft's project.
 */
export async function applyDraftRules(
  trx: Transaction<Database>,
  policies: PolicyRepository,
  scope: OrgScope,
  rules: DraftRule[],
  now: string,
): Promise<{ applied: AppliedPolicy[]; skipped: SkippedDraftRule[] }> {
  const compiled = compileDraftRules(rules);
  const applied: AppliedPolicy[] = [];
  const skipped: SkippedDraftRule[] = [...compiled.skipped];
  for (const { toolName, constraints } of compiled.policies) {
    let existing = await policies.get(scope.organizationId, toolName, trx);
    if (!existing) {
      const def = checked(toolName, mergedDefinition(undefined, constraints));
      if (await policies.insertIfAbsent(newPolicyRow(scope, toolName, def, now), trx)) {
        applied.push({ toolName, version: 1, created: true });
        continue;
      }
      // Created concurrently since the read: merge into that one instead.
      existing = await policies.get(scope.organizationId, toolName, trx);
    }
    if (existing?.mode === 'llm') {
      for (const ruleId of ruleIdsFor(rules, toolName, compiled.skipped)) {
        skipped.push({
          ruleId,
          toolName,
          reason: `tool "${toolName}" has an llm-mode policy; it was left unchanged (switch it to deterministic to apply the rules)`,
        });
      }
      continue;
    }
    // Read-merge-write under optimistic concurrency: the merge is written only while the policy is
    // still exactly the one it was merged from (version, definition and creation time: a policy
    // deleted and created again since may have the same version); otherwise merge again into what
    // is there now.
    for (let attempt = 0; ; attempt++) {
      if (!existing) {
        // Deleted since it was read: create it, unless it was created again meanwhile.
        const fresh = checked(toolName, mergedDefinition(undefined, constraints));
        if (await policies.insertIfAbsent(newPolicyRow(scope, toolName, fresh, now), trx)) {
          applied.push({ toolName, version: 1, created: true });
          break;
        }
      } else {
        if (attempt > 0 && existing.mode === 'llm') {
          throw new AppError(
            'conflict',
            `The policy of tool "${toolName}" became an llm policy during approval; try again`,
          );
        }
        const def = checked(toolName, mergedDefinition(existing, constraints));
        const patch = {
          ...definitionColumns(def),
          is_active: 1,
          project_id: scope.projectId,
          updated_at: now,
        };
        const row = await policies.replace(scope.organizationId, toolName, patch, trx, existing);
        if (row) {
          applied.push({
            toolName,
            version: row.version,
            created: false,
            ...(existing.is_active ? {} : { activated: true }),
          });
          break;
        }
      }
      if (attempt >= 4) {
        throw new AppError(
          'conflict',
          `The policy of tool "${toolName}" kept changing during approval; try again`,
        );
      }
      existing = await policies.get(scope.organizationId, toolName, trx);
    }
  }
  return { applied, skipped };
}

/**
 * The definition to write, or 400 and the transaction (with the draft's status move) rolls back.
 * The pattern count is a real refusal: drafts are checked against it on write, but a draft written
 * before the limit, or one whose patterns come within it alone but not added to the tool's policy,
 * passes there. The rest is a defect guard: compileDraftRules screens every rule and stored policies
 * were checked on write.
 */
function checked(toolName: string, def: PolicyDefinition): PolicyDefinition {
  // Counted before any pattern is compiled, as a PUT does.
  const tooMany = patternCountProblem(def);
  const problems = tooMany ? [tooMany] : checkPolicyDefinition(def);
  if (problems.length > 0)
    throw invalid(`The rules for tool "${toolName}" cannot be saved: ${problems.join(' ')}`);
  return def;
}
