import {
  type CompiledPolicy,
  compileDraftRules,
  compilePolicy,
  type Decision,
  type DraftRule,
  evaluate,
  type FailedConstraint,
} from '@svc/policy-engine';
import type { Kysely } from 'kysely';
import type { Database } from '../../storage/schema.js';
import { definitionOf } from '../policies/cache.js';
import type { PolicyRepository } from '../policies/repository.js';
import type { SkippedDraftRule } from './apply.js';

export const DEFAULT_REPLAY_LIMIT = 100;
export const MAX_REPLAY_LIMIT = 1000;

/**
 * A replay reads decisions a few at a time and stops once the arguments and contexts it has read
 * reach this many characters (each decision may hold about 1 MiB of arguments: 1,000 of them would
 * be a gigabyte in one answer). The decision that crosses it is still replayed.
 */
export const REPLAY_READ_BUDGET = 16 * 1024 * 1024;
/** Decisions read per query. */
const REPLAY_PAGE = 8;

/** One recorded decision whose outcome the draft would have changed. */
export interface ChangedDecision {
  decisionId: string;
  toolName: string;
  arguments: Record<string, unknown>;
  createdAt: string;
  agentId?: string;
  sessionId?: string;
  before: { decision: string; reason: string };
  after: { decision: Decision; reason: string; failedConstraints: FailedConstraint[] };
}

export interface ReplayResult {
  draftId: string;
  /** The tools whose recorded decisions were replayed. */
  tools: string[];
  /** How many recorded decisions were replayed (at most the limit asked for). */
  examined: number;
  /**
   * True when the replay stopped before the limit because the decisions read held REPLAY_READ_BUDGET
   * characters of arguments and context: older decisions were not replayed.
   */
  truncated: boolean;
  changed: ChangedDecision[];
  /** Rules (or tools) the replay left out, as approving would. */
  skipped: SkippedDraftRule[];
}

const RANK: Record<Decision, number> = { allow: 0, require_approval: 1, deny: 2 };

function isDecision(d: string): d is Decision {
  return d === 'allow' || d === 'deny' || d === 'require_approval';
}

function contextOf(json: string): Record<string, unknown> {
  try {
    const ctx = JSON.parse(json) as unknown;
    return ctx && typeof ctx === 'object' && !Array.isArray(ctx) ? (ctx as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Replays a draft against the organization's most recent recorded decisions for the tools it names:
 * which of them would have ended otherwise had the draft been approved before they were made.
 *
 * Approving appends the draft's constraints to each tool's policy (applyDraftRules) and never
 * weakens it, so a decision after approval is the stricter of what was recorded and what the draft's
 * own constraints answer for the same arguments (deny over require_approval over allow). Approving
 * also makes an inactive policy active, so its own constraints are replayed with the draft's. Tools
 * with an llm-mode policy are left out, as approving leaves them unchanged. Nothing is written.
 */
export async function replayDraft(
  db: Kysely<Database>,
  policies: PolicyRepository,
  organizationId: string,
  draft: { id: string; rules: DraftRule[] },
  limit: number,
): Promise<ReplayResult> {
  const compiled = compileDraftRules(draft.rules);
  const skipped: SkippedDraftRule[] = [...compiled.skipped];
  const checks = new Map<string, CompiledPolicy>();
  for (const { toolName, constraints } of compiled.policies) {
    const current = await policies.get(organizationId, toolName);
    if (current?.mode === 'llm') {
      const already = new Set(skipped.map((s) => s.ruleId));
      for (const r of draft.rules) {
        if (r.tools.includes(toolName) && r.enabled !== false && !already.has(r.id)) {
          skipped.push({
            ruleId: r.id,
            toolName,
            reason: `tool "${toolName}" has an llm-mode policy; approving leaves it unchanged`,
          });
        }
      }
      continue;
    }
    // Approving makes the policy active: an inactive policy's own constraints then apply again too,
    // and calls it let through unchecked may be refused by them.
    const revived = current && current.is_active !== 1 ? (definitionOf(current).constraints ?? []) : [];
    checks.set(toolName, compilePolicy({ mode: 'deterministic', constraints: [...revived, ...constraints] }));
  }
  const tools = [...checks.keys()];
  if (tools.length === 0)
    return { draftId: draft.id, tools, examined: 0, truncated: false, changed: [], skipped };

  // The organization's decisions for these tools, newest first, from after `from` on.
  const newest = (from: { createdAt: string; id: string } | null) =>
    db
      .selectFrom('decisions')
      .where('organization_id', '=', organizationId)
      .where('tool_name', 'in', tools)
      // (created_at, id) before the cursor, written with a range on created_at that an index serves.
      .$if(from !== null, (q) =>
        q
          .where('created_at', '<=', from!.createdAt)
          .where((eb) => eb.or([eb('created_at', '<', from!.createdAt), eb('id', '<', from!.id)])),
      )
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc');

  const changed: ChangedDecision[] = [];
  let examined = 0;
  let read = 0;
  let last: { createdAt: string; id: string } | null = null;
  let more = true;
  while (more && examined < limit) {
    if (read >= REPLAY_READ_BUDGET) {
      // Stopped on a page boundary: whether an older decision is left decides `truncated`.
      more = (await newest(last).select('id').limit(1).execute()).length > 0;
      break;
    }
    const size = Math.min(REPLAY_PAGE, limit - examined);
    const rows = await newest(last)
      .select(['id', 'tool_name', 'arguments', 'context', 'decision', 'reason', 'created_at'])
      .limit(size)
      .execute();
    more = rows.length === size;
    for (const row of rows) {
      if (read >= REPLAY_READ_BUDGET) {
        more = true;
        break;
      }
      read += row.arguments.length + row.context.length;
      examined++;
      last = { createdAt: row.created_at, id: row.id };
      const change = replayOne(row, checks);
      if (change) changed.push(change);
    }
  }
  const truncated = more && examined < limit && read >= REPLAY_READ_BUDGET;
  return { draftId: draft.id, tools, examined, truncated, changed, skipped };
}

/** What the draft makes of one recorded decision: its change, or null when the outcome stays. */
function replayOne(
  row: {
    id: string;
    tool_name: string;
    arguments: string;
    context: string;
    decision: string;
    reason: string;
    created_at: string;
  },
  checks: Map<string, CompiledPolicy>,
): ChangedDecision | null {
  if (!isDecision(row.decision)) return null;
  const args = JSON.parse(row.arguments) as Record<string, unknown>;
  const ctx = contextOf(row.context);
  const verdict = evaluate(checks.get(row.tool_name)!, args);
  if (RANK[verdict.decision] <= RANK[row.decision]) return null;
  const after = verdict.decision;
  return {
    decisionId: row.id,
    toolName: row.tool_name,
    arguments: args,
    createdAt: row.created_at,
    ...(typeof ctx.agent_id === 'string' ? { agentId: ctx.agent_id } : {}),
    ...(typeof ctx.session_id === 'string' ? { sessionId: ctx.session_id } : {}),
    before: { decision: row.decision, reason: row.reason },
    after: {
      decision: after,
      reason: verdict.reason ?? '',
      failedConstraints: [...verdict.failedConstraints],
    },
  };
}
