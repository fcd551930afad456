import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import {
  type Constraint,
  checkPolicyDefinition,
  type PolicyDefinition,
  starterPolicy,
  type ToolArgument,
} from '@svc/policy-engine';
import type { Kysely } from 'kysely';
import type { EventBus } from '../../events/bus.js';
import { canonicalJson } from '../../ledger/canonical.js';
import type { Clock } from '../../lib/clock.js';
import { AppError, invalid, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { Database } from '../../storage/schema.js';
import type { Judge } from '../llm-judge/model.js';
import { definitionOf } from '../policies/cache.js';
import { definitionColumns, newPolicyRow, patternCountProblem, policyEvent } from '../policies/model.js';
import type { PolicyRepository } from '../policies/repository.js';
import type { ToolRepository } from '../tools/repository.js';
import { assertNoDuplicates, type ToolService } from '../tools/service.js';
import { describeChange } from './analyse.js';
import { type Ask, chatWithModel, compileWithModel, type OrganizationAsk } from './assist.js';
import { answerQuestion, type LivePolicy } from './chat.js';
import { compileMessage } from './compile.js';
import type {
  CompiledRule,
  PolicyChange,
  Progress,
  ToolInfo,
  ToolRegistration,
  TurnInput,
  TurnResult,
  Verification,
  VerificationKind,
  VerificationRef,
} from './model.js';
import type { CharterRepository, ConversationRow, VerificationRow } from './repository.js';

/** Turns kept per conversation: enough to continue it, bounded so a chatty client cannot grow a row. */
const MAX_TURNS = 40;

export interface CharterServiceDeps {
  db: Kysely<Database>;
  repo: CharterRepository;
  tools: Pick<ToolRepository, 'list'>;
  policies: PolicyRepository;
  registry: Pick<ToolService, 'upsert'>;
  cache: { invalidate(organizationId: string, toolName: string): void };
  events: EventBus;
  clock: Clock;
  /** SVC_BASE_URL: review links are built under it. */
  baseUrl: string;
  judgeRoute: Judge['route'];
  /** The configured model, for what the offline reader cannot handle; null when none is configured. */
  ask: OrganizationAsk | null;
}

/** Seconds a turn refused because its organization's model calls are all in flight is told to wait. */
const BUSY_RETRY_SECONDS = 5;

const QUESTION =
  /\?\s*$|^\s*(?:what|which|who|why|how|is|are|does|do|would|will|can|could|should|may|list|show|describe|explain|tell me)\b/i;

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

function toInfo(row: { name: string; description: string | null; arguments: string }): ToolInfo {
  return { name: row.name, description: row.description, arguments: JSON.parse(row.arguments) };
}

/** The arguments a policy's rules name, typed by the checks on them (numeric bounds: number). */
function toolFromPolicy(name: string, def: PolicyDefinition): ToolInfo {
  const types = new Map<string, ToolArgument['type']>();
  const numeric = (c: Constraint) =>
    [c.minimum, c.maximum, c.greaterThan, c.lessThan, c.greaterThanOrEqual, c.lessThanOrEqual].some(
      (v) => v !== undefined,
    );
  for (const c of def.constraints ?? []) {
    const type = numeric(c)
      ? 'number'
      : c.minItems !== undefined || c.maxItems !== undefined
        ? 'array'
        : 'string';
    if (!types.has(c.argumentName) || type !== 'string') types.set(c.argumentName, type);
  }
  for (const l of def.sessionConstraints?.cumulativeLimits ?? []) types.set(l.argumentName, 'number');
  return {
    name,
    description: null,
    arguments: [...types].map(([argName, type]) => ({ name: argName, type })),
  };
}

export function toVerification(row: VerificationRow): Verification {
  return {
    id: row.id,
    kind: row.kind as VerificationKind,
    status: row.status as Verification['status'],
    conversationId: row.conversation_id,
    summary: row.summary,
    changes: JSON.parse(row.changes),
    tools: JSON.parse(row.tools),
    createdAt: row.created_at,
    resolvedAt: row.resolved_at,
    resolvedBy: row.resolved_by,
    applied: row.applied ? JSON.parse(row.applied) : null,
  };
}

function who(scope: OrgScope): string {
  const p = scope.principal;
  return p.kind === 'user' ? p.userId : p.kind === 'apiKey' ? `apikey:${p.keyId}` : 'admin';
}

/** What a reviewer must know beside the rules: a change to an inactive policy is not enforced. */
const INACTIVE = 'inactive: not enforced until activated';
const inactive = (c: PolicyChange) => c.current?.isActive === false;

function compileReply(
  offered: PolicyChange[],
  refused: PolicyChange[],
  notUnderstood: TurnResult['notUnderstood'],
): string {
  const lines: string[] = [];
  for (const c of offered) {
    lines.push(
      `Proposed for ${c.toolName}${c.current ? ` (now v${c.current.version}${inactive(c) ? `, ${INACTIVE}` : ''})` : ' (no policy yet)'}:`,
    );
    for (const r of c.rules) lines.push(`- ${r}`);
    for (const f of c.analysis.findings) lines.push(`! ${f.message}`);
  }
  for (const c of refused) {
    lines.push(
      `Not offered for ${c.toolName}: the result would be an invalid policy (${c.quality.issues.join(' ')})`,
    );
  }
  for (const n of notUnderstood) lines.push(`Not understood: "${n.text}": ${n.why}.`);
  if (offered.length > 0) lines.push('Nothing is live until a person approves it at the verification link.');
  if (offered.length === 0 && refused.length === 0 && notUnderstood.length === 0)
    lines.push('There was no rule in that message.');
  return lines.join('\n');
}

export function createCharterService(deps: CharterServiceDeps) {
  const { db, repo, policies, clock } = deps;

  async function grounding(organizationId: string) {
    const [toolRows, policyRows] = await Promise.all([
      deps.tools.list(organizationId),
      policies.list(organizationId),
    ]);
    const live = new Map<string, LivePolicy & { row: (typeof policyRows)[number] }>();
    for (const row of policyRows) {
      live.set(row.tool_name, {
        version: row.version,
        isActive: row.is_active === 1,
        definition: definitionOf(row),
        row,
      });
    }
    const tools = toolRows.map(toInfo);
    // A policy written for a tool that was never registered still names the tool and its arguments.
    for (const [name, p] of live) {
      if (!tools.some((t) => t.name === name)) tools.push(toolFromPolicy(name, p.definition));
    }
    return { tools, policies: live };
  }

  async function openVerification(
    scope: OrgScope,
    kind: VerificationKind,
    summary: string,
    changes: PolicyChange[],
    tools: ToolRegistration[],
    conversationId: string | null,
  ): Promise<VerificationRef> {
    const id = uuidv7();
    const secret = randomBytes(24).toString('base64url');
    await repo.insertVerification({
      id,
      organization_id: scope.organizationId,
      project_id: scope.projectId,
      conversation_id: conversationId,
      kind,
      status: 'pending',
      summary,
      changes: JSON.stringify(changes),
      tools: JSON.stringify(tools),
      link_hash: sha256(secret),
      requested_by: who(scope),
      applied: null,
      resolved_by: null,
      resolved_at: null,
      created_at: clock.now().toISOString(),
    });
    return {
      required: true,
      id,
      status: 'pending',
      linkUrl: `${deps.baseUrl}/charter/verify/${id}?token=${secret}`,
    };
  }

  async function conversationOf(scope: OrgScope, id: string | undefined): Promise<ConversationRow> {
    const now = clock.now().toISOString();
    if (id !== undefined) {
      const row = await repo.getConversation(scope.organizationId, id);
      if (!row) throw notFound(`Conversation ${id}`);
      return row;
    }
    return {
      id: uuidv7(),
      organization_id: scope.organizationId,
      project_id: scope.projectId,
      last_tool: null,
      turns: '[]',
      created_at: now,
      updated_at: now,
    };
  }

  /**
   * The model, asked for one organization. When the organization already has as many calls in flight
   * as it may, the turn is refused (429, nothing saved) rather than answered without the model.
   */
  function askFor(organizationId: string): Ask | null {
    const ask = deps.ask;
    if (!ask) return null;
    return async (schema, system, prompt) => {
      const res = await ask(organizationId, schema, system, prompt);
      if (!res.ok && res.busy) {
        throw new AppError(
          'rate_limit_exceeded',
          `Charter cannot ask the model now: ${res.message}; retry shortly`,
          {
            'retry-after': String(BUSY_RETRY_SECONDS),
          },
        );
      }
      return res;
    };
  }

  function changesFor(rules: CompiledRule[], ground: Awaited<ReturnType<typeof grounding>>): PolicyChange[] {
    const byTool = new Map<string, CompiledRule[]>();
    for (const r of rules) byTool.set(r.toolName, [...(byTool.get(r.toolName) ?? []), r]);
    return [...byTool].map(([toolName, toolRules]) => {
      const live = ground.policies.get(toolName);
      const tool = ground.tools.find((t) => t.name === toolName) ?? null;
      return describeChange(
        toolName,
        tool,
        live ? { version: live.version, isActive: live.isActive, definition: live.definition } : null,
        toolRules,
      );
    });
  }

  return {
    async turn(scope: OrgScope, input: TurnInput, progress: Progress = () => {}): Promise<TurnResult> {
      progress('received', 'reading the message');
      const conversation = await conversationOf(scope, input.conversationId);
      const ground = await grounding(scope.organizationId);
      const ask = askFor(scope.organizationId);
      const mode = input.mode === 'auto' ? (QUESTION.test(input.message) ? 'chat' : 'compile') : input.mode;
      let result: Omit<TurnResult, 'conversationId'>;
      let lastTool = conversation.last_tool;
      if (mode === 'chat') {
        progress('grounding', `reading ${ground.tools.length} tools and ${ground.policies.size} policies`);
        const answer = answerQuestion(input.message, {
          tools: ground.tools,
          policies: ground.policies,
          fallbackTool: lastTool,
          judgeRoute: deps.judgeRoute,
        });
        lastTool = answer.toolName ?? lastTool;
        let reply = answer.reply;
        if (!answer.answered) {
          progress('model', 'asking the configured model');
          const modelAnswer = ask
            ? await chatWithModel(ask, input.message, ground.tools, ground.policies)
            : null;
          reply =
            modelAnswer ??
            `${answer.reply}\n\nAsk about a tool by name ("what is the policy of send_payment?") or describe a call ("would send_payment with amount 5000 be allowed?").`;
        }
        result = {
          mode,
          reply,
          understood: [],
          notUnderstood: [],
          changes: [],
          dryRuns: answer.dryRuns,
          verification: { required: false },
        };
      } else {
        progress('compiling', 'reading the rules in the message');
        const compiled = compileMessage(input.message, ground.tools, lastTool);
        if (compiled.notUnderstood.length > 0 && ask && ground.tools.length > 0) {
          progress('model', `asking the configured model about ${compiled.notUnderstood.length} part(s)`);
          const assisted = await compileWithModel(ask, compiled.notUnderstood, ground.tools);
          compiled.rules.push(...assisted.rules);
          compiled.notUnderstood = assisted.notUnderstood;
        }
        progress(
          'analysing',
          `checking ${compiled.rules.length} rule(s) against the tools and current policies`,
        );
        const changes = changesFor(compiled.rules, ground);
        const offered = changes.filter((c) => c.quality.valid);
        const refused = changes.filter((c) => !c.quality.valid);
        lastTool = compiled.rules.at(-1)?.toolName ?? lastTool;
        let verification: VerificationRef = { required: false };
        if (offered.length > 0) {
          progress('verification', 'opening a verification for a person to approve');
          const summary = offered
            .map((c) => `${c.toolName}${inactive(c) ? ` (${INACTIVE})` : ''}: ${c.rules.join('; ')}`)
            .join(' | ');
          verification = await openVerification(
            scope,
            'policy_change',
            summary,
            offered,
            [],
            conversation.id,
          );
        }
        result = {
          mode,
          reply: compileReply(offered, refused, compiled.notUnderstood),
          understood: compiled.rules.map((r) => `${r.toolName}: ${r.summary}`),
          notUnderstood: compiled.notUnderstood,
          changes: offered,
          dryRuns: [],
          verification,
        };
      }
      const now = clock.now().toISOString();
      const turns = [
        ...JSON.parse(conversation.turns),
        { role: 'user', text: input.message, surface: input.surface, at: now },
        { role: 'assistant', text: result.reply, at: now },
      ];
      await repo.saveConversation({
        ...conversation,
        last_tool: lastTool,
        turns: JSON.stringify(turns.slice(-MAX_TURNS)),
        updated_at: now,
      });
      return { conversationId: conversation.id, ...result };
    },

    /** Tool definitions proposed through MCP: registered only once a person approves. */
    async proposeTools(
      scope: OrgScope,
      tools: ToolRegistration[],
    ): Promise<{ verification: VerificationRef; changes: PolicyChange[] }> {
      assertNoDuplicates(tools);
      const ground = await grounding(scope.organizationId);
      const changes = tools
        .filter((t) => !ground.tools.some((r) => r.name === t.name) && !ground.policies.has(t.name))
        .map((t) => {
          const def = starterPolicy(t.arguments).definition;
          // Registering refuses a starter policy with too many patterns (tools service); a proposal
          // that could never be approved is refused now, in the same words, and nothing is opened.
          const tooMany = patternCountProblem(def);
          if (tooMany) {
            throw invalid(
              `Request rejected, nothing was saved: the starter policy of tool "${t.name}" cannot be saved: ${tooMany}`,
            );
          }
          const info = { name: t.name, description: t.description ?? null, arguments: t.arguments };
          // Scored and analysed as the policy that goes live: the starter policy, not an empty one.
          const change = describeChange(t.name, info, null, [], def);
          return { ...change, rules: ['starter policy from the declared arguments'] };
        });
      const summary = `Register ${tools.map((t) => t.name).join(', ')}`;
      return {
        verification: await openVerification(scope, 'tool_registration', summary, changes, tools, null),
        changes,
      };
    },

    async assertConversation(scope: OrgScope, id: string): Promise<void> {
      await conversationOf(scope, id);
    },

    async get(scope: OrgScope, id: string): Promise<Verification> {
      const row = await repo.getVerification(scope.organizationId, id);
      if (!row) throw notFound(`Verification ${id}`);
      return toVerification(row);
    },

    async listPending(scope: OrgScope): Promise<Verification[]> {
      return (await repo.listPending(scope.organizationId)).map(toVerification);
    },

    /** For the review page: the verification whose link secret matches, else null. */
    async forLink(id: string, token: string): Promise<Verification | null> {
      const row = await repo.getVerificationForLink(id);
      if (!row) return null;
      const a = Buffer.from(sha256(token), 'hex');
      const b = Buffer.from(row.link_hash, 'hex');
      return a.length === b.length && timingSafeEqual(a, b) ? toVerification(row) : null;
    },

    /**
     * Applies the change as one versioned update per tool, in one transaction with the status change;
     * a policy that changed since the proposal makes the approval fail (409) and nothing is applied.
     * A verification resolved meanwhile (also by an approval running at the same moment) is 400
     * invalid_status, whatever its changes would have met.
     */
    async approve(scope: OrgScope, id: string): Promise<Verification> {
      const row = await repo.getVerification(scope.organizationId, id);
      if (!row) throw notFound(`Verification ${id}`);
      if (row.status !== 'pending')
        throw new AppError('invalid_status', `Verification ${id} is already ${row.status}`);
      const v = toVerification(row);
      const now = clock.now().toISOString();
      const by = who(scope);
      const actor = { ...scope, projectId: row.project_id };
      if (v.kind === 'tool_registration') {
        // The reviewer saw a starter policy for each tool that was new (neither registered nor with a
        // policy) when proposed, and none for the others. Registering now makes a starter policy for
        // each tool that is new now: a tool new now but not then would get one nobody saw, one new
        // then but not now would be governed by a policy the reviewer was not shown.
        const ground = await grounding(scope.organizationId);
        for (const t of v.tools) {
          const isNew = !ground.tools.some((r) => r.name === t.name) && !ground.policies.has(t.name);
          const shown = v.changes.some((c) => c.toolName === t.name);
          if (isNew !== shown) {
            throw new AppError(
              'conflict',
              `"${t.name}" was ${shown ? 'registered or given a policy' : 'deleted or its policy removed'} since this proposal, so it would ${shown ? 'not get the starter policy shown' : 'get a starter policy that was not shown'}; nothing was applied. Propose the registration again.`,
            );
          }
        }
        if (!(await repo.resolve(scope.organizationId, id, 'approved', by, now, null))) {
          throw new AppError('invalid_status', `Verification ${id} was resolved meanwhile`);
        }
        let result: Awaited<ReturnType<typeof deps.registry.upsert>>;
        try {
          result = await deps.registry.upsert(actor, v.tools);
        } catch (err) {
          // Not registered means not approved: the verification goes back to pending.
          await db
            .updateTable('charter_verifications')
            .set({ status: 'pending', resolved_by: null, resolved_at: null })
            .where('organization_id', '=', scope.organizationId)
            .where('id', '=', id)
            .execute();
          throw err;
        }
        const applied = result.generated.map((g) => ({ toolName: g.toolName, version: 1 }));
        await db
          .updateTable('charter_verifications')
          .set({ applied: JSON.stringify(applied) })
          .where('organization_id', '=', scope.organizationId)
          .where('id', '=', id)
          .execute();
        return { ...v, status: 'approved', resolvedAt: now, resolvedBy: by, applied };
      }
      const applied: { toolName: string; version: number; created: boolean }[] = [];
      await db.transaction().execute(async (trx) => {
        // The status first, conditionally: of two approvals at once, the second waits here for the
        // first (PostgreSQL locks the row until that commits) and then finds it resolved, so it answers
        // invalid_status, not a conflict with the policy the first one just wrote. A refusal below
        // rolls the status back with everything else.
        if (!(await repo.resolve(scope.organizationId, id, 'approved', by, now, null, trx))) {
          throw new AppError('invalid_status', `Verification ${id} was resolved meanwhile`);
        }
        for (const change of v.changes) {
          // Counted before any pattern is compiled, as a PUT does: a proposal made before the limit
          // may hold more patterns than a policy may now.
          const tooMany = patternCountProblem(change.proposed);
          const problems = tooMany ? [tooMany] : checkPolicyDefinition(change.proposed as PolicyDefinition);
          if (problems.length > 0)
            throw invalid(`The change for "${change.toolName}" cannot be saved: ${problems.join(' ')}`);
          const current = await policies.get(scope.organizationId, change.toolName, trx);
          const expected = change.current?.version ?? null;
          // The version alone does not say it is the policy the reviewer saw: a policy deleted and
          // written again starts at version 1 again. Its definition must be the one shown too.
          const unchanged =
            (current?.version ?? null) === expected &&
            (!current ||
              canonicalJson(definitionOf(current)) === canonicalJson(change.current?.definition ?? null));
          if (!unchanged) {
            throw new AppError(
              'conflict',
              `The policy of "${change.toolName}" changed since this proposal (v${expected ?? 'none'} → v${current?.version ?? 'none'}${(current?.version ?? null) === expected ? ', rewritten' : ''}); nothing was applied. Ask again for a fresh proposal.`,
            );
          }
          // Activity is part of what the reviewer saw, and it has no version: a change approved over a
          // policy deactivated since would be saved where nothing enforces it, one activated since
          // would go live unseen. A proposal that recorded no activity showed none: read as active.
          const seenActive = change.current?.isActive ?? true;
          if (current && (current.is_active === 1) !== seenActive) {
            throw new AppError(
              'conflict',
              `The policy of "${change.toolName}" was ${seenActive ? 'deactivated' : 'activated'} since this proposal (v${expected}, proposed while ${seenActive ? 'active' : 'inactive'}); nothing was applied. Ask again for a fresh proposal.`,
            );
          }
          if (!current) {
            if (
              !(await policies.insertIfAbsent(
                newPolicyRow(actor, change.toolName, change.proposed, now),
                trx,
              ))
            ) {
              throw new AppError(
                'conflict',
                `A policy for "${change.toolName}" was created meanwhile; nothing was applied`,
              );
            }
            applied.push({ toolName: change.toolName, version: 1, created: true });
            continue;
          }
          const patch = {
            ...definitionColumns(change.proposed),
            project_id: actor.projectId,
            updated_at: now,
          };
          const written = await policies.replace(
            scope.organizationId,
            change.toolName,
            patch,
            trx,
            // Exactly the policy that was read and compared: a policy deleted and created again has
            // a version of its own again.
            current,
          );
          // The written row shows an (de)activation committed between the read above and the write.
          if (!written || (written.is_active === 1) !== seenActive)
            throw new AppError(
              'conflict',
              `The policy of "${change.toolName}" changed during approval; nothing was applied`,
            );
          applied.push({ toolName: change.toolName, version: written.version, created: false });
        }
        await trx
          .updateTable('charter_verifications')
          .set({ applied: JSON.stringify(applied.map(({ toolName, version }) => ({ toolName, version }))) })
          .where('organization_id', '=', scope.organizationId)
          .where('id', '=', id)
          .execute();
      });
      for (const a of applied) {
        deps.cache.invalidate(scope.organizationId, a.toolName);
        deps.events.publish(
          a.created
            ? policyEvent(actor, 'policy.created', a.toolName)
            : policyEvent(actor, 'policy.updated', a.toolName, { version: a.version }),
        );
      }
      return {
        ...v,
        status: 'approved',
        resolvedAt: now,
        resolvedBy: by,
        applied: applied.map(({ toolName, version }) => ({ toolName, version })),
      };
    },

    /** Rejection changes nothing but the verification's status. */
    async reject(scope: OrgScope, id: string): Promise<Verification> {
      const row = await repo.getVerification(scope.organizationId, id);
      if (!row) throw notFound(`Verification ${id}`);
      const now = clock.now().toISOString();
      const by = who(scope);
      if (
        row.status !== 'pending' ||
        !(await repo.resolve(scope.organizationId, id, 'rejected', by, now, null))
      ) {
        throw new AppError(
          'invalid_status',
          `Verification ${id} is already ${row.status === 'pending' ? 'resolved' : row.status}`,
        );
      }
      return { ...toVerification(row), status: 'rejected', resolvedAt: now, resolvedBy: by };
    },
  };
}

export type CharterService = ReturnType<typeof createCharterService>;
