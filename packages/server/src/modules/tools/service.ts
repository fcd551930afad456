import { starterPolicy, type ToolArgument } from '@svc/policy-engine';
import type { Kysely } from 'kysely';
import type { EventBus } from '../../events/bus.js';
import type { Clock } from '../../lib/clock.js';
import { invalid, notFound } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Database } from '../../storage/schema.js';
import type { PolicyCache } from '../policies/cache.js';
import { newPolicyRow, patternCountProblem, policyEvent } from '../policies/model.js';
import type { PolicyRepository } from '../policies/repository.js';
import type { ToolRepository, ToolRow } from './repository.js';

export interface Tool {
  name: string;
  description: string | null;
  arguments: ToolArgument[];
  createdAt: string;
  updatedAt: string;
}

export interface ToolInput {
  name: string;
  description?: string | undefined;
  arguments: ToolArgument[];
}

export interface UpsertResult {
  tools: { name: string; status: 'created' | 'updated' }[];
  /** Starter policies written, with the declarations each one could not enforce. */
  generated: { toolName: string; skipped: string[] }[];
}

export interface ToolServiceDeps {
  db: Kysely<Database>;
  tools: ToolRepository;
  policies: PolicyRepository;
  cache: Pick<PolicyCache, 'invalidate'>;
  events: EventBus;
  clock: Clock;
}

export const toTool = (row: ToolRow): Tool => ({
  name: row.name,
  description: row.description,
  arguments: JSON.parse(row.arguments),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export const toolNotFound = (name: string) => notFound(`Tool "${name}"`);

function duplicates(names: string[]): string[] {
  const seen = new Set<string>();
  const dup = new Set<string>();
  for (const n of names) (seen.has(n) ? dup : seen).add(n);
  return [...dup];
}

const quoted = (names: string[]) => names.map((n) => `"${n}"`).join(', ');

/** Refuses the whole request before anything is written: a duplicate makes "which one wins" ambiguous. */
export function assertNoDuplicates(input: ToolInput[]): void {
  const problems: string[] = [];
  const tools = duplicates(input.map((t) => t.name));
  if (tools.length > 0) problems.push(`duplicate tool names: ${quoted(tools)}`);
  for (const tool of input) {
    const args = duplicates(tool.arguments.map((a) => a.name));
    if (args.length > 0) problems.push(`tool "${tool.name}" has duplicate argument names: ${quoted(args)}`);
  }
  if (problems.length > 0) throw invalid(`Request rejected, nothing was saved: ${problems.join('; ')}`);
}

export function registerMessage(result: UpsertResult): string {
  const n = result.tools.length;
  const created = result.tools.filter((t) => t.status === 'created').length;
  const policies = result.generated.length;
  let message =
    `Registered ${n} tool${n === 1 ? '' : 's'} (${created} new); ` +
    `generated ${policies} starter polic${policies === 1 ? 'y' : 'ies'}.`;
  for (const g of result.generated) {
    if (g.skipped.length > 0) message += ` Starter policy for "${g.toolName}": ${g.skipped.join(' ')}`;
  }
  return message;
}

export function createToolService({ db, tools, policies, cache, events, clock }: ToolServiceDeps) {
  return {
    /**
     * Upserts tool definitions in one transaction. A tool registered for the first time that has no
     * policy gets a starter policy; an existing tool never does, so a deliberately deleted policy is
     * not brought back by the next registration.
     */
    async upsert(scope: OrgScope, input: ToolInput[]): Promise<UpsertResult> {
      assertNoDuplicates(input);
      const now = clock.now().toISOString();
      const result = await db.transaction().execute(async (trx) => {
        const out: UpsertResult = { tools: [], generated: [] };
        for (const tool of input) {
          const status = await tools.upsert(
            {
              organization_id: scope.organizationId,
              name: tool.name,
              description: tool.description ?? null,
              arguments: JSON.stringify(tool.arguments),
              created_at: now,
              updated_at: now,
            },
            trx,
          );
          out.tools.push({ name: tool.name, status });
          if (status !== 'created') continue;
          const starter = starterPolicy(tool.arguments);
          const tooMany = patternCountProblem(starter.definition);
          if (tooMany) {
            throw invalid(
              `Request rejected, nothing was saved: the starter policy of tool "${tool.name}" cannot be saved: ${tooMany}`,
            );
          }
          const row = newPolicyRow(scope, tool.name, starter.definition, now);
          if (await policies.insertIfAbsent(row, trx)) {
            out.generated.push({ toolName: tool.name, skipped: starter.skipped });
          }
        }
        return out;
      });
      for (const g of result.generated) {
        // The cache may hold a "no policy" answer for this tool.
        cache.invalidate(scope.organizationId, g.toolName);
        events.publish(policyEvent(scope, 'policy.created', g.toolName));
      }
      return result;
    },

    async list(scope: OrgScope): Promise<Tool[]> {
      return (await tools.list(scope.organizationId)).map(toTool);
    },

    async get(scope: OrgScope, name: string): Promise<Tool> {
      const row = await tools.get(scope.organizationId, name);
      if (!row) throw toolNotFound(name);
      return toTool(row);
    },

    /** Deletes the tool and the policy targeting it, together. */
    async delete(scope: OrgScope, name: string): Promise<void> {
      const policyRemoved = await db.transaction().execute(async (trx) => {
        if (!(await tools.delete(scope.organizationId, name, trx))) throw toolNotFound(name);
        return policies.delete(scope.organizationId, name, trx);
      });
      cache.invalidate(scope.organizationId, name);
      if (policyRemoved) events.publish(policyEvent(scope, 'policy.deleted', name));
    },
  };
}

export type ToolService = ReturnType<typeof createToolService>;
