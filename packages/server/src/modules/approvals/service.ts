import type { EventBus } from '../../events/bus.js';
import { argumentHash } from '../../ledger/receipt.js';
import type { DecisionWriter } from '../../ledger/writer.js';
import type { Clock } from '../../lib/clock.js';
import { AppError, forbidden, invalid, notFound } from '../../lib/errors.js';
import type { OrgScope } from '../../lib/scope.js';
import {
  APPROVALS_NEED_TEAM,
  type Approval,
  type ApprovalAction,
  type ApprovalStep,
  approvalHash,
  approvalsAllowed,
  approversOf,
  type Escalation,
  type NewApproval,
  type PendingApproval,
  pendingApprovalRow,
  type ResolvedPage,
  requesterOf,
  statusAt,
  stepsOf,
  toApproval,
  toPending,
} from './model.js';
import type { ApprovalRepository, ApprovalRow } from './repository.js';
import { createApprovalSweeper } from './sweeper.js';

/** Where an approval lives; validation passes this without a principal. */
export type ApprovalTenant = Pick<OrgScope, 'organizationId' | 'projectId'>;

export const SELF_RESOLVE = 'an API key cannot resolve an approval it requested';
/** What opened an approval other than a tool call, in words. */
const OPENERS: Partial<Record<Escalation['source'], string>> = {
  economic: 'a spend authorization',
  gateway: 'a capsule mint',
};
export const LINEAGE_RESOLVE =
  'an API key cannot resolve an approval a key of its lineage requested (the key that minted it, or one minted by it or by the same key)';

/**
 * Who resolves, as recorded. A user resolves as the token's `sub` (a body `resolvedBy` may only
 * restate it); an API key needs the `approvals:resolve` scope and names the person whose decision it
 * relays, and is recorded beside that name.
 */
export interface Resolver {
  resolvedBy: string;
  byKeyId: string | null;
  /** The relaying key's lineage: it may not resolve what a key of its lineage requested. */
  byLineageId: string | null;
  /**
   * The person who created the relaying key (null: a user resolves, or the key's creator is
   * unknown). Under dual control a step through the key is theirs as much as `resolvedBy`'s.
   */
  byKeyCreator: string | null;
}

export function resolverOf(scope: OrgScope, resolvedBy: string | undefined): Resolver {
  const p = scope.principal;
  if (p.kind === 'user') {
    if (resolvedBy !== undefined && resolvedBy !== p.userId) {
      throw forbidden(
        `resolvedBy "${resolvedBy}" is not the signed-in user: a user token resolves as its own user ("${p.userId}"); omit resolvedBy`,
      );
    }
    return { resolvedBy: p.userId, byKeyId: null, byLineageId: null, byKeyCreator: null };
  }
  if (!p.scopes.includes('approvals:resolve')) {
    throw forbidden('This API key cannot resolve approvals: it needs the approvals:resolve scope');
  }
  if (resolvedBy === undefined) {
    throw invalid(
      'body/resolvedBy is required with an API key: name the person whose decision the key relays',
    );
  }
  if (resolvedBy.trim() === '') {
    throw invalid('body/resolvedBy must name the person whose decision the key relays, not only spaces');
  }
  return { resolvedBy, byKeyId: p.keyId, byLineageId: p.lineageId, byKeyCreator: p.createdBy ?? null };
}

/**
 * Whether two recorded names are one person's: compared in Unicode normalization form C, without
 * default-ignorable characters (zero-width spaces, joiners) or surrounding spaces; case counts, as
 * identity providers' ids may differ by case alone. "José" written with a combining accent is the
 * same person as "José" written precomposed, and "alice " or "al\u200Bice" is "alice", so a key
 * relaying one spelling cannot count a person again who approved (or asked) with another.
 */
export function samePerson(a: string, b: string): boolean {
  // Default-ignorable characters (zero-width spaces and joiners, invisible marks) change nothing shown.
  const key = (name: string) =>
    name
      .normalize('NFC')
      .replace(/\p{Default_Ignorable_Code_Point}/gu, '')
      .trim();
  return a === b || key(a) === key(b);
}

/**
 * Dual control counts people, not names: a step given through an API key is given by the person it
 * names and by the person who created the key (a lineage's keys share their root's creator). So the
 * requester (the person whose token asked, or who created the key that asked) gives no step, in
 * person or through a key of theirs, and one person's keys, or a person and their own key, are one
 * approver. A key whose creator is unknown (made before creators were recorded, or by a key made
 * then) could be anyone's, the requester's included: it gives no dual-control approval (a deny, which
 * only stops the payment, it still may). Names are compared as samePerson compares them.
 */
function personCheck(
  id: string,
  action: ApprovalAction,
  required: number,
  row: ApprovalRow,
  steps: ApprovalStep[],
  creators: { requester: string | null; steps: (string | null)[] },
  { resolvedBy, byKeyId, byKeyCreator }: Resolver,
): void {
  if (action === 'approve') {
    if (byKeyId !== null && byKeyCreator === null) {
      throw forbidden(
        `API key ${byKeyId} has no recorded creator (it was created before key creators were recorded, or minted by such a key): under dual control an approval through a key counts as its creator's, so it cannot approve approval ${id}; a person approves with their own token or an approver key they create now`,
      );
    }
    const requesterKey = row.requested_by_key_id;
    if (creators.requester !== null && samePerson(creators.requester, resolvedBy)) {
      throw forbidden(
        `${resolvedBy} created API key ${requesterKey}, which requested approval ${id}: under dual control the requester cannot approve it`,
      );
    }
    if (byKeyCreator !== null) {
      if (row.requested_by !== null && samePerson(row.requested_by, byKeyCreator)) {
        throw forbidden(
          `API key ${byKeyId} was created by ${byKeyCreator}, who requested approval ${id}: under dual control the requester cannot approve it, in person or through a key of theirs, whoever the key names`,
        );
      }
      if (creators.requester !== null && samePerson(creators.requester, byKeyCreator)) {
        throw forbidden(
          `API key ${byKeyId} was created by ${byKeyCreator}, who created API key ${requesterKey}, which requested approval ${id}: under dual control the requester cannot approve it, in person or through a key of theirs, whoever the key names`,
        );
      }
    }
    // A step the requester gave, recorded by an instance of an older version (which knew no key
    // creators) during an upgrade: the approval cannot reach its people without them.
    const requesters = [row.requested_by, creators.requester].filter((r): r is string => r !== null);
    for (const [i, s] of steps.entries()) {
      const creator = creators.steps[i] ?? null;
      const by = requesters.find(
        (r) => samePerson(r, s.resolvedBy) || (creator !== null && samePerson(r, creator)),
      );
      if (by !== undefined) {
        throw forbidden(
          `approval ${id} holds an approval that ${by}, who requested it, gave${s.byKeyId ? ` through API key ${s.byKeyId}` : ''} (recorded by an older version of the service during an upgrade): under dual control it cannot be completed; deny it and request again`,
        );
      }
    }
  }
  for (const [i, s] of steps.entries()) {
    const creator = creators.steps[i] ?? null;
    const how =
      byKeyCreator !== null && samePerson(byKeyCreator, s.resolvedBy)
        ? `${byKeyCreator}, who created API key ${byKeyId}, already approved approval ${id}`
        : creator !== null && samePerson(creator, resolvedBy)
          ? `${resolvedBy} already approved approval ${id} through API key ${s.byKeyId}, which they created`
          : byKeyCreator !== null && creator !== null && samePerson(byKeyCreator, creator)
            ? `API key ${s.byKeyId}, created by ${creator} as API key ${byKeyId} was, already relayed an approval of approval ${id}`
            : null;
    if (how !== null) {
      throw new AppError(
        'approval_already_resolved',
        `${how}: an approval through an API key counts as its creator's too, and approval ${id} needs ${required} distinct people (${steps.length} so far)`,
      );
    }
  }
}

export type OpenApproval = NewApproval;

export interface CreateApprovalInput {
  decisionId?: string;
  toolName: string;
  arguments?: Record<string, unknown>;
  expiresInSeconds?: number;
}

/** A resolution step's answer; `pending` when more approvers are needed (dual control). */
export interface Resolved {
  id: string;
  status: 'pending' | 'approved' | 'denied';
  resolvedBy: string;
  resolvedAt: string;
  requiredApprovals: number;
  approvers: { resolvedBy: string; resolvedAt: string }[];
}

/** A committed step: the row after it, the step itself, and whether it decided the approval. */
interface Stepped {
  row: ApprovalRow;
  step: ApprovalStep;
  decided: boolean;
}

export interface BatchResult {
  id: string;
  status: string;
  resolvedBy?: string;
  resolvedAt?: string;
  requiredApprovals?: number;
  approvers?: { resolvedBy: string; resolvedAt: string }[];
  error?: { code: string; message: string };
}

/** Outcome of presenting an approval with a call (context.approval_id). */
export type ApprovalUse =
  | { ok: true; approvalId: string; resolvedBy: string; release(): Promise<void> }
  | { ok: false; reason: string };

export interface ApprovalServiceDeps {
  approvals: ApprovalRepository;
  writer: Pick<DecisionWriter, 'write'>;
  events: EventBus;
  clock: Clock;
  log: { error(obj: object, msg: string): void };
  /** Tier of an organization, for user principals (API key principals carry theirs). */
  tierOf: (organizationId: string) => Promise<string>;
  sweepIntervalMs?: number;
}

export function createApprovalService(deps: ApprovalServiceDeps) {
  const { approvals, writer, events, clock, log, tierOf } = deps;
  const sweeper = createApprovalSweeper({
    approvals,
    events,
    clock,
    log,
    ...(deps.sweepIntervalMs !== undefined ? { intervalMs: deps.sweepIntervalMs } : {}),
  });
  const now = () => clock.now().toISOString();

  /**
   * The people behind an approval under dual control, besides the names steps carry: the creator of
   * the key that requested it, and of each key that relayed a step (null where unknown). Approvals
   * and steps recorded before creators were (migration 0030), or by an instance of an older version,
   * read them from the keys, if those still exist.
   */
  async function creatorsOf(
    organizationId: string,
    row: ApprovalRow,
    steps: ApprovalStep[],
  ): Promise<{ requester: string | null; steps: (string | null)[] }> {
    const requesterKey = row.requested_by_key_creator === null ? row.requested_by_key_id : null;
    const unknown = new Set<string>();
    if (requesterKey !== null) unknown.add(requesterKey);
    for (const s of steps) if (s.byKeyCreator === undefined && s.byKeyId) unknown.add(s.byKeyId);
    const found = await approvals.keyCreators(organizationId, [...unknown]);
    return {
      requester: requesterKey === null ? row.requested_by_key_creator : (found.get(requesterKey) ?? null),
      steps: steps.map((s) =>
        s.byKeyCreator !== undefined ? s.byKeyCreator : s.byKeyId ? (found.get(s.byKeyId) ?? null) : null,
      ),
    };
  }

  async function load(organizationId: string, id: string): Promise<ApprovalRow> {
    const row = await approvals.get(organizationId, id);
    if (!row) throw notFound('Approval');
    return row;
  }

  /**
   * One person's resolution. An approval needing one approver is decided by it; under dual control
   * an approve is one step (the approval stays pending until `required_approvals` distinct people
   * approved) and a deny decides at once. Refusals are the errors the spec names, plus
   * approval_already_resolved for a person (or relaying key) resolving the same approval twice.
   */
  async function transition(
    scope: ApprovalTenant,
    id: string,
    action: ApprovalAction,
    resolver: Resolver,
  ): Promise<Stepped> {
    const { resolvedBy, byKeyId, byLineageId, byKeyCreator } = resolver;
    for (let attempt = 0; attempt < 8; attempt++) {
      const at = now();
      const current = await load(scope.organizationId, id);
      const state = statusAt(current, at);
      if (state === 'expired') throw new AppError('expired', `Approval expired at ${current.expires_at}`);
      if (state !== 'pending') {
        throw new AppError('invalid_status', `Approval is already ${state}; it can be resolved only once`);
      }
      if (byKeyId !== null && current.requested_by_key_id === byKeyId) throw forbidden(SELF_RESOLVE);
      // An approval an older version opened has no lineage recorded: its key's own id is its lineage.
      const requesterLineage = current.requested_by_lineage_id ?? current.requested_by_key_id;
      if (byKeyId !== null && requesterLineage === byLineageId) {
        throw forbidden(LINEAGE_RESOLVE);
      }
      const required = Number(current.required_approvals ?? 1);
      const steps = stepsOf(current);
      if (required > 1) {
        if (
          action === 'approve' &&
          current.requested_by !== null &&
          samePerson(current.requested_by, resolvedBy)
        ) {
          throw forbidden(
            `${resolvedBy} requested approval ${id}: under dual control the requester cannot approve it`,
          );
        }
        if (steps.some((s) => samePerson(s.resolvedBy, resolvedBy))) {
          throw new AppError(
            'approval_already_resolved',
            `${resolvedBy} already approved approval ${id}; it needs ${required} distinct people (${steps.length} so far)`,
          );
        }
        // Keys of one lineage are one relay: a key could otherwise mint a second approver key.
        const relayed = steps.find(
          (s) => byKeyId !== null && (s.byKeyId === byKeyId || (s.byLineageId ?? s.byKeyId) === byLineageId),
        );
        if (relayed) {
          throw new AppError(
            'approval_already_resolved',
            relayed.byKeyId === byKeyId
              ? `API key ${byKeyId} already relayed an approval of approval ${id}; another person must approve with their own token or another approver key`
              : `API key ${relayed.byKeyId}, of the lineage of API key ${byKeyId}, already relayed an approval of approval ${id}; another person must approve with their own token or an approver key of another lineage`,
          );
        }
        // Keys count as their creators too: the requester's keys, and one person's keys, give no step more.
        const creators = await creatorsOf(scope.organizationId, current, steps);
        personCheck(id, action, required, current, steps, creators, resolver);
      }
      const step: ApprovalStep = {
        resolvedBy,
        resolvedAt: at,
        byKeyId,
        byLineageId,
        ...(byKeyId !== null ? { byKeyCreator } : {}),
      };
      const next = action === 'approve' ? [...steps, step] : steps;
      const decided = action === 'deny' || next.length >= required;
      const row = await approvals.advance(
        scope.organizationId,
        id,
        current.approvers,
        {
          approvers: JSON.stringify(next),
          ...(decided
            ? {
                status: action === 'approve' ? 'approved' : 'denied',
                resolved_by: resolvedBy,
                resolved_at: at,
                resolved_by_key_id: byKeyId,
              }
            : {}),
        },
        at,
      );
      if (row) return { row, step, decided };
      // Another resolution (or the expiry) came first: decide again on what it left.
    }
    throw new AppError('conflict', 'The approval is being resolved concurrently; send the request again');
  }

  /** After the step committed: chain its resolution receipt, then announce a decided approval. */
  async function resolved({ row, step, decided }: Stepped, action: ApprovalAction): Promise<Resolved> {
    const { resolvedBy, resolvedAt } = step;
    const required = Number(row.required_approvals ?? 1);
    const count = stepsOf(row).length;
    const progress = required > 1 && action === 'approve' ? ` (${count} of ${required} approvals)` : '';
    try {
      await writer.write({
        receipt: {
          organization_id: row.organization_id,
          project_id: row.project_id,
          decision_id: row.decision_id,
          decision: action === 'approve' ? 'approval_approved' : 'approval_denied',
          mode: null,
          tool_name: row.tool_name,
          argument_hash: row.argument_hash,
          policy_version: null,
          policy_hash: null,
          reason: `Approval ${row.id} ${decided ? row.status : 'approved'} by ${resolvedBy}${
            step.byKeyId ? ` through API key ${step.byKeyId}` : ''
          }${progress}`,
          timestamp: resolvedAt,
          approval_id: row.id,
          approval_hash: approvalHash(row.id, action, resolvedBy),
        },
      });
    } catch (err) {
      // SPEC §3: a failed resolution receipt is logged and does not block the resolve.
      log.error({ err, approvalId: row.id }, 'approval resolution receipt could not be written');
    }
    if (decided) {
      events.publish({
        organizationId: row.organization_id,
        type: 'approval.resolved',
        data: { approvalId: row.id, action, resolvedBy },
      });
    }
    return {
      id: row.id,
      status: row.status as Resolved['status'],
      resolvedBy,
      resolvedAt,
      requiredApprovals: required,
      approvers: approversOf(row),
    };
  }

  /** The batch entry of an id whose transition failed; never throws. */
  async function failure(scope: ApprovalTenant, id: string, err: unknown): Promise<BatchResult> {
    if (!(err instanceof AppError)) {
      log.error({ err, approvalId: id }, 'approval could not be resolved');
      return {
        id,
        status: 'unknown',
        error: { code: 'internal_error', message: 'The approval could not be resolved' },
      };
    }
    let current: ApprovalRow | undefined;
    if (err.code !== 'not_found') {
      current = await approvals.get(scope.organizationId, id).catch(() => undefined);
    }
    return {
      id,
      status: current ? statusAt(current, now()) : err.code === 'not_found' ? 'not_found' : 'unknown',
      error: { code: err.code, message: err.message },
    };
  }

  /** Opens a pending approval without a plan check (validation checked it when deciding). */
  async function open(scope: ApprovalTenant, input: OpenApproval): Promise<ApprovalRow> {
    const row = pendingApprovalRow(scope, input, clock.now());
    await approvals.insert(row);
    events.publish({
      organizationId: scope.organizationId,
      type: 'approval.created',
      data: { approvalId: row.id, toolName: row.tool_name, decisionId: row.decision_id },
    });
    return row;
  }

  return {
    open,

    /**
     * POST /v1/approvals. A linked decision must be one of the organization's, for the same tool;
     * omitted arguments default to the decision's.
     */
    async create(scope: OrgScope, input: CreateApprovalInput): Promise<PendingApproval> {
      const tier =
        scope.principal.kind === 'apiKey' ? scope.principal.tier : await tierOf(scope.organizationId);
      if (!approvalsAllowed(tier)) {
        throw new AppError(
          'plan_limit_exceeded',
          `This organization is on the ${tier} plan: ${APPROVALS_NEED_TEAM}`,
        );
      }
      let args = input.arguments;
      if (input.decisionId !== undefined) {
        const decision = await approvals.decisionCall(scope.organizationId, input.decisionId);
        if (!decision) throw notFound('Decision');
        if (decision.toolName !== input.toolName) {
          throw invalid(
            `body/toolName "${input.toolName}" does not match tool "${decision.toolName}" of decision ${input.decisionId}`,
          );
        }
        // A linked approval shows the decision's escalation: it must be for the call that decision was.
        if (args !== undefined && argumentHash(args) !== argumentHash(decision.arguments)) {
          throw invalid(
            `body/arguments differ from the arguments of decision ${input.decisionId}: omit them to approve that call, or omit decisionId`,
          );
        }
        args ??= decision.arguments;
      }
      const row = await open(scope, {
        decisionId: input.decisionId ?? null,
        toolName: input.toolName,
        arguments: args ?? {},
        ...requesterOf(scope.principal),
        ...(input.expiresInSeconds !== undefined ? { expiresInSeconds: input.expiresInSeconds } : {}),
      });
      return toPending(row);
    },

    async listPending(scope: ApprovalTenant): Promise<PendingApproval[]> {
      return (await approvals.listPending(scope.organizationId, now())).map(toPending);
    },

    /** GET /v1/approvals/resolved: a page of the organization's resolved approvals, as GET /v1/decisions pages. */
    async listResolved(scope: ApprovalTenant, limit: number, offset: number): Promise<ResolvedPage> {
      const at = now();
      const { rows, total } = await approvals.listResolved(scope.organizationId, limit, offset);
      return {
        data: rows.map((r) => toApproval(r, at)),
        pagination: { total, limit, offset, hasMore: offset + rows.length < total },
      };
    },

    async get(scope: ApprovalTenant, id: string): Promise<Approval> {
      return toApproval(await load(scope.organizationId, id), now());
    },

    async resolve(
      scope: OrgScope,
      id: string,
      action: ApprovalAction,
      resolvedBy?: string,
    ): Promise<Resolved> {
      const resolver = resolverOf(scope, resolvedBy);
      return resolved(await transition(scope, id, action, resolver), action);
    },

    /** Resolves each id on its own; every id is reported, in request order. */
    async batchResolve(
      scope: OrgScope,
      ids: string[],
      action: ApprovalAction,
      resolvedBy?: string,
    ): Promise<BatchResult[]> {
      // Who resolves is one answer for the whole request: a refusal there refuses the batch.
      const resolver = resolverOf(scope, resolvedBy);
      const outcomes: (Stepped | BatchResult)[] = [];
      for (const id of ids) {
        try {
          outcomes.push(await transition(scope, id, action, resolver));
        } catch (err) {
          outcomes.push(await failure(scope, id, err));
        }
      }
      // Receipts of the whole batch are queued together, so the writer commits them as one group.
      // A failure after an id's transition committed is reported for that id only: the others'
      // receipts and events still go out.
      return Promise.all(
        outcomes.map(async (o) => {
          if (!('row' in o)) return o;
          try {
            return await resolved(o, action);
          } catch (err) {
            log.error({ err, approvalId: o.row.id }, 'approval resolution could not be announced');
            return {
              id: o.row.id,
              status: o.row.status,
              resolvedBy: o.step.resolvedBy,
              resolvedAt: o.step.resolvedAt,
            };
          }
        }),
      );
    },

    /**
     * Uses an approved approval for a call: once, for the same tool and argument hash. The use is
     * claimed with a conditional UPDATE, so two calls presenting one approval cannot both pass.
     */
    async use(
      organizationId: string,
      id: string,
      call: { toolName: string; arguments: Record<string, unknown> },
      /** The project of the key that presents it, if a key does. */
      projectId?: string | null,
    ): Promise<ApprovalUse> {
      const at = now();
      const row = await approvals.get(organizationId, id);
      const refuse = (why: string): ApprovalUse => ({ ok: false, reason: `approval ${id} ${why}` });
      if (!row) return refuse('was not found');
      // What an agent's key does stays in its project: a key uses approvals its own project's keys
      // opened, or people did, never another project's (as for capsule mints); that one is not found.
      if (projectId !== undefined && row.requested_by_key_id !== null && row.project_id !== projectId)
        return refuse('was not found');
      const status = statusAt(row, at);
      if (status === 'pending') return refuse('is still pending: wait until it is approved');
      if (status === 'expired') return refuse(`expired at ${row.expires_at} without a decision`);
      if (status === 'denied') return refuse(`was denied by ${row.resolved_by}`);
      if (row.used_at !== null)
        return refuse(`was already used at ${row.used_at}; an approval allows one call`);
      // What opened it, as stored since migration 0019 (older ones read as a tool call's).
      const opener = row.escalation ? (JSON.parse(row.escalation) as Escalation).source : 'policy';
      if (opener !== 'policy') {
        const what = OPENERS[opener] ?? `a ${String(opener)} request`;
        return refuse(`was opened for ${what}, which it allows, not for a tool call`);
      }
      if (row.tool_name !== call.toolName)
        return refuse(`was granted for tool "${row.tool_name}", not "${call.toolName}"`);
      const hash = argumentHash(call.arguments);
      if (row.argument_hash !== hash) return refuse('was granted for different arguments');
      if (!(await approvals.use(organizationId, id, { toolName: call.toolName, argumentHash: hash }, at))) {
        return refuse('was already used; an approval allows one call');
      }
      return {
        ok: true,
        approvalId: id,
        resolvedBy: row.resolved_by ?? '',
        release: () => approvals.unuse(organizationId, id, at),
      };
    },

    sweep: sweeper.sweep,
    startSweeper: sweeper.start,
    stopSweeper: sweeper.stop,
  };
}

export type ApprovalService = ReturnType<typeof createApprovalService>;
