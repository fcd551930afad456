import {
  checkPolicyDefinition,
  compileDraftRules,
  type DraftRule,
  type PolicyDefinition,
  type SkippedRule,
} from '@svc/policy-engine';
import type { Transaction } from 'kysely';
import { invalid } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Database } from '../../storage/schema.js';
import { definitionOf } from '../policies/cache.js';
import { definitionColumns, newPolicyRow } from '../policies/model.js';
import type { PolicyRepository } from '../policies/repository.js';

export interface AppliedPolicy {
  toolName: string;
  version: number;
  created: boolean;
}

/**
 * Writes the approvable rules of a draft as policies, inside the caller's transaction: one merged
 * constraint set per tool (compileDraftRules), which becomes a new active policy (version 1) or
 * replaces the constraints of the existing one (version + 1). The draft's rules are the tool's
 * deterministic policy from now on, so the mode becomes deterministic; session limits, the LLM
 * config and whether the policy is active are kept. `scope.projectId` is the draft's project.
 */
export async function applyDraftRules(
  trx: Transaction<Database>,
  policies: PolicyRepository,
  scope: OrgScope,
  rules: DraftRule[],
  now: string,
): Promise<{ applied: AppliedPolicy[]; skipped: SkippedRule[] }> {
  const compiled = compileDraftRules(rules);
  const applied: AppliedPolicy[] = [];
  for (const { toolName, constraints } of compiled.policies) {
    const existing = await policies.get(scope.organizationId, toolName, trx);
    const kept = existing ? definitionOf(existing) : null;
    const def: PolicyDefinition = {
      mode: 'deterministic',
      constraints,
      sessionConstraints: kept?.sessionConstraints ?? null,
      llmConfig: kept?.llmConfig ?? null,
    };
    const problems = checkPolicyDefinition(def);
    // compileDraftRules screens every rule, so this is a defect guard; the transaction rolls back.
    if (problems.length > 0)
      throw invalid(`The rules for tool "${toolName}" cannot be saved: ${problems.join(' ')}`);
    if (!existing && (await policies.insertIfAbsent(newPolicyRow(scope, toolName, def, now), trx))) {
      applied.push({ toolName, version: 1, created: true });
      continue;
    }
    // Replaced in place; a policy created concurrently since the read above is replaced as well.
    const patch = { ...definitionColumns(def), project_id: scope.projectId, updated_at: now };
    const row = await policies.replace(scope.organizationId, toolName, patch, trx);
    if (row) {
      applied.push({ toolName, version: row.version, created: false });
      continue;
    }
    // Deleted concurrently since the read: create it after all.
    await policies.insert(newPolicyRow(scope, toolName, def, now), trx);
    applied.push({ toolName, version: 1, created: true });
  }
  return { applied, skipped: compiled.skipped };
}
