import {
  type AuthorizationOutcome,
  BUDGET_SCOPES,
  type BudgetScope,
  decideAuthorization,
  type EconomicConfig,
  figuresOf,
  formatUsd,
  limitOf,
  type ScopeUsage,
  toUsd,
  windowStart,
} from '@svc/policy-engine';
import type { EventBus } from '../../events/bus.js';
import { hashJson } from '../../ledger/canonical.js';
import { argumentHash } from '../../ledger/receipt.js';
import type { Clock } from '../../lib/clock.js';
import { AppError, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import { isStoreUnavailable } from '../../storage/db.js';
import { approvalsAllowed, pendingApprovalRow, requesterOf, statusAt } from '../approvals/model.js';
import { type ApprovalRow, createApprovalRepository } from '../approvals/repository.js';
import { type ConfigInput, DEFAULT_APPROVAL_WINDOW_SECONDS, loadEffective, saveConfig } from './config.js';
import {
  type ActionRequest,
  type ActionState,
  type Authority,
  type AuthorizationAnswer,
  type AuthorizeInput,
  approvalArguments,
  type Budget,
  type CommitAnswer,
  type CommitInput,
  type ConfigAnswer,
  type StatusAnswer,
  toScopeBudget,
} from './model.js';
import type { SpendReceipt, SpendReceipts } from './receipts.js';
import type {
  ActionRow,
  EconomicConfigRepository,
  LedgerTx,
  ReceiptSlot,
  ScopeKeys,
  SpendLedger,
} from './repository.js';

export interface BudgetServiceDeps {
  ledger: SpendLedger;
  configs: EconomicConfigRepository;
  receipts: SpendReceipts;
  events: EventBus;
  clock: Clock;
  log: { error(obj: object, msg: string): void };
  /** Tier of an organization, for user principals (API key principals carry theirs). */
  tierOf: (organizationId: string) => Promise<string>;
}

type Caller = Pick<OrgScope, 'organizationId' | 'projectId' | 'principal'>;

/**
 * An action belongs to the project whose key authorized it: another project's key may neither
 * replay its answer nor commit its reservation (a person of the organization may act on any).
 */
function ownAction<T extends { project_id: string | null; action_id: string }>(
  scope: Caller,
  row: T | undefined,
): T | undefined {
  if (row && scope.principal.kind === 'apiKey' && row.project_id !== scope.projectId) {
    throw new AppError(
      'action_conflict',
      `Action "${row.action_id}" belongs to another project of the organization; use another actionId`,
    );
  }
  return row;
}

const ZERO: ScopeUsage = { spentMicros: 0, reservedMicros: 0 };

/** A receipt claim older than this belongs to a writer that died: another request takes it over. */
const RECEIPT_CLAIM_MS = 60_000;
/** How long a request sent again waits for the receipt another request is writing. */
const RECEIPT_WAIT_MS = 10_000;
const RECEIPT_POLL_MS = 20;
/**
 * How many times one authorize tries to chain the earlier authorization's owed receipt (each try
 * followed by a new look at the action) before it refuses.
 */
const EARLIER_RECEIPT_ATTEMPTS = 3;
/** Actions the receipt sweep reads per pass (each owes one or two receipts). */
const REPAIR_PAGE = 100;
/**
 * How long the sweep of a process leaves an action whose owed receipt it failed to chain before it
 * tries it again: actions that keep failing do not hold the oldest-first page, newer ones get theirs.
 */
const REPAIR_RETRY_MS = 10 * 60_000;

/** The stored form of a request: what idempotency compares, and what receipts hash. */
function requestRecord(r: ActionRequest): Record<string, unknown> {
  return {
    actionId: r.actionId,
    sessionId: r.sessionId,
    agentId: r.agentId,
    toolName: r.toolName,
    category: r.category,
    payer: r.payer,
    estimatedSpendMicros: r.quoteMicros,
    maxAcceptableSpendMicros: r.maxAcceptableMicros,
    budgetScopes: r.budgetScopes,
    metadata: r.metadata,
  };
}

function commitRecord(c: CommitInput): Record<string, unknown> {
  return {
    actionId: c.actionId,
    sessionId: c.sessionId,
    agentId: c.agentId,
    toolName: c.toolName,
    category: c.category,
    payer: c.payer,
    quotedSpendMicros: c.quoteMicros,
    actualSpendMicros: c.actualMicros,
    approvalId: c.approvalId,
  };
}

/** The request field each stored field comes from. */
const FIELD_NAMES: Record<string, string> = {
  estimatedSpendMicros: 'estimatedSpendUsd',
  maxAcceptableSpendMicros: 'maxAcceptableSpendUsd',
};

/** Request fields on which two records disagree, for a conflict message. */
function differing(a: Record<string, unknown>, b: Record<string, unknown>): string[] {
  return Object.keys(b)
    .filter((k) => hashJson(a[k] ?? null) !== hashJson(b[k] ?? null))
    .map((k) => FIELD_NAMES[k] ?? k);
}

const conflict = (actionId: string, what: string, fields: string[]) =>
  new AppError(
    'action_conflict',
    `Action "${actionId}" was already ${what} with different content (${fields.join(', ')}); use a new actionId for a different action`,
  );

/** The window an approval opened by this configuration is pending for, and an approved one usable for. */
const approvalWindowOf = (config: EconomicConfig | null) =>
  config?.approvalWindowSeconds ?? DEFAULT_APPROVAL_WINDOW_SECONDS;

/**
 * When an approved approval of an action stops being usable: `approvalWindowSeconds` after a person
 * approved it (its resolution). Past it the action is decided again as if it had no approval.
 */
function usableUntil(approval: ApprovalRow, config: EconomicConfig | null): string {
  const approvedAt = Date.parse(approval.resolved_at ?? approval.created_at);
  return new Date(approvedAt + approvalWindowOf(config) * 1000).toISOString();
}

/**
 * Why an approval does not fit the action as it would be done now: the approved arguments that
 * differ from the arguments rebuilt with what the action resolves to now (its payer), or null when
 * they are the same action (same tool, same argument hash).
 */
function approvalMismatch(
  approval: ApprovalRow,
  toolName: string,
  now: Record<string, unknown>,
): string | null {
  if (approval.tool_name === toolName && approval.argument_hash === argumentHash(now)) return null;
  const approved = JSON.parse(approval.arguments) as Record<string, unknown>;
  const show = (v: unknown) => JSON.stringify(v ?? null);
  const fields = [
    ...(approval.tool_name !== toolName
      ? [`toolName ${show(approval.tool_name)}, now ${show(toolName)}`]
      : []),
    ...[...new Set([...Object.keys(approved), ...Object.keys(now)])]
      .filter((k) => hashJson(approved[k] ?? null) !== hashJson(now[k] ?? null))
      .map((k) => `${k} ${show(approved[k])}, now ${show(now[k])}`),
  ];
  return `Approval ${approval.id} was granted for a different action than the one authorized now (approved ${fields.length > 0 ? fields.join('; ') : 'other arguments'}); it is not used. Authorize the action under a new actionId to ask a person again`;
}

function keysFor(
  r: { sessionId: string; agentId: string; category: string },
  config: EconomicConfig | null,
  at: string,
): ScopeKeys {
  return {
    sessionId: r.sessionId,
    agentId: r.agentId,
    category: r.category,
    agentWindow: windowStart(config?.agentWindow ?? 'day', at),
    categoryWindow: windowStart(config?.categoryWindow ?? 'day', at),
  };
}

/**
 * The figures of the requested scopes and of every scope with a limit: every limit is checked
 * whatever `budgetScopes` names, so the answer shows each one that could have decided it.
 */
function budgetOf(
  config: EconomicConfig | null,
  usage: Record<BudgetScope, ScopeUsage>,
  scopes: readonly BudgetScope[],
  category: string,
  asOf: string,
): Budget {
  const budget: Budget = { currency: 'USD', asOf, source: 'ledger' };
  for (const scope of BUDGET_SCOPES) {
    const limit = config ? limitOf(config, scope, category) : null;
    if (limit === null && !scopes.includes(scope)) continue;
    budget[scope] = toScopeBudget(figuresOf(limit, usage[scope] ?? ZERO));
  }
  return budget;
}

const withReserved = (usage: Record<BudgetScope, ScopeUsage>, amount: number) =>
  Object.fromEntries(
    BUDGET_SCOPES.map((s) => [s, { ...usage[s], reservedMicros: usage[s].reservedMicros + amount }]),
  ) as Record<BudgetScope, ScopeUsage>;

const STATE_OF: Record<AuthorizationOutcome['decision'], ActionState> = {
  allow: 'reserved',
  deny: 'denied',
  require_approval: 'pending_approval',
};

interface Fresh {
  kind: 'fresh';
  row: ActionRow;
  answer: AuthorizationAnswer;
  approval: ApprovalRow | null;
}
interface Replay {
  kind: 'replay';
  row: ActionRow;
}
/** The action would be decided again, but its current authorization still owes its receipt. */
interface Owed {
  kind: 'owed';
  row: ActionRow;
}

/** What decides whether a slot's receipt is owed and whose it is to write. */
function slotOf(row: ActionRow, slot: ReceiptSlot) {
  return slot === 'authorize'
    ? {
        entryId: row.authorization_id,
        receiptId: row.authorize_receipt_id,
        claimedAt: row.authorize_receipt_claimed_at,
      }
    : { entryId: row.commit_id, receiptId: row.commit_receipt_id, claimedAt: row.commit_receipt_claimed_at };
}

/**
 * The economic API: authorizations decided one at a time per organization on its spend ledger,
 * so concurrent calls (on any number of processes) can never together exceed a budget.
 */
export function createBudgetService(deps: BudgetServiceDeps) {
  const { ledger, configs, receipts, events, clock, log } = deps;
  const now = () => clock.now().toISOString();

  async function tierOf(scope: Caller): Promise<string> {
    return scope.principal.kind === 'apiKey' ? scope.principal.tier : deps.tierOf(scope.organizationId);
  }

  /**
   * Writes the receipt of a slot this process claimed at `at` and stores its id. A claim taken over
   * from a writer that died first looks for the receipt that writer may have chained. On failure the
   * claim is given back, unless a receipt may exist: one chained but not stored, or a write whose
   * outcome the store did not tell (it may have committed), keeps the claim, and whoever takes it
   * over once it is stale finds that receipt.
   */
  async function writeClaimed(
    org: string,
    actionId: string,
    slot: ReceiptSlot,
    entryId: string,
    at: string,
    takeover: boolean,
    write: () => Promise<string>,
  ): Promise<void> {
    let chained: string | undefined;
    try {
      if (takeover) chained = await ledger.receiptFor(org, entryId);
      chained ??= await write();
      await ledger.setReceipt(org, actionId, slot, entryId, at, chained);
    } catch (err) {
      if (chained === undefined && !isStoreUnavailable(err))
        await ledger.releaseReceipt(org, actionId, slot, entryId, at).catch(() => {});
      throw err;
    }
  }

  /**
   * Chains one receipt of an action's entry (its authorization or its commit) unless it has it: of
   * requests sent at once (on any instance) the one that claims the write writes it, and the others
   * wait for it, so a request sent again never chains a second receipt. A claim is on the entry: once
   * the action is decided again, a request still holding the older entry writes nothing. A claim
   * taken over from a writer that died first looks for the receipt that writer may have chained.
   */
  async function chainOnce(
    org: string,
    actionId: string,
    slot: ReceiptSlot,
    entryId: string,
    write: () => Promise<string>,
  ): Promise<void> {
    const what = slot === 'authorize' ? 'authorization' : 'commit';
    const unavailable = (detail: string) =>
      new AppError(
        'service_unavailable',
        `The ${what} is recorded but ${detail}; send the same request again`,
      );
    const waitUntil = performance.now() + RECEIPT_WAIT_MS;
    for (let takeover = false; ; ) {
      const at = now();
      let claimed: boolean;
      try {
        if (takeover) {
          const stale = new Date(clock.now().getTime() - RECEIPT_CLAIM_MS).toISOString();
          claimed = await ledger.claimReceipt(org, actionId, slot, entryId, at, stale);
        } else {
          claimed = await ledger.claimReceipt(org, actionId, slot, entryId, at, null);
        }
      } catch (err) {
        log.error({ err, actionId }, `spend ${what} receipt could not be claimed`);
        throw unavailable('its receipt could not be written');
      }
      if (claimed) {
        try {
          await writeClaimed(org, actionId, slot, entryId, at, takeover, write);
          return;
        } catch (err) {
          log.error({ err, actionId }, `spend ${what} receipt could not be written`);
          throw unavailable('its receipt could not be written');
        }
      }
      let state: Awaited<ReturnType<typeof ledger.receiptState>>;
      try {
        state = await ledger.receiptState(org, actionId, slot);
      } catch (err) {
        log.error({ err, actionId }, `spend ${what} receipt could not be read`);
        throw unavailable('its receipt could not be written');
      }
      // Written, or the action was decided again (its new entry is another request's to chain).
      if (!state || state.entryId !== entryId || state.receiptId !== null) return;
      const stale = new Date(clock.now().getTime() - RECEIPT_CLAIM_MS).toISOString();
      takeover = state.claimedAt !== null && state.claimedAt < stale;
      if (takeover || state.claimedAt === null) continue;
      if (performance.now() >= waitUntil) throw unavailable('another request is writing its receipt');
      await new Promise((resolve) => setTimeout(resolve, RECEIPT_POLL_MS));
    }
  }

  /** The receipt of the authorization an action row holds: its entry, answer, amount and request. */
  function authorizationReceiptOf(row: ActionRow, config: EconomicConfig | null): SpendReceipt {
    const answer = JSON.parse(row.answer) as AuthorizationAnswer;
    return {
      organizationId: row.organization_id,
      projectId: row.project_id,
      entryId: row.authorization_id,
      decision: answer.decision,
      actionId: row.action_id,
      toolName: (JSON.parse(row.request) as { toolName: string }).toolName,
      amountMicros: Number(row.amount_micros),
      payer: answer.payer,
      // Answers stored before a denied approval was named in them still name it in their row.
      approvalId: answer.approvalId ?? row.approval_id ?? null,
      reason: `${answer.reasonCode}: ${answer.message}`,
      timestamp: row.decided_at,
      request: JSON.parse(row.request),
      config,
    };
  }

  /** The receipt of a committed action's commit, as the commit request `input` made it. */
  function commitReceiptOf(row: ActionRow, input: CommitInput, config: EconomicConfig | null): SpendReceipt {
    const answer = JSON.parse(row.commit_answer!) as CommitAnswer;
    return {
      organizationId: row.organization_id,
      projectId: row.project_id,
      entryId: row.commit_id!,
      decision: 'economic_committed',
      actionId: row.action_id,
      toolName: input.toolName,
      amountMicros: input.actualMicros,
      payer: answer.payer,
      approvalId: answer.approvalId,
      reason: `economic_committed: ${answer.message}`,
      timestamp: answer.budget.asOf,
      request: commitRecord(input),
      config,
    };
  }

  /**
   * The commit request of a committed action, rebuilt from what it stored: every field is the
   * authorization's but the actual amount (its ledger entry's), and `payer` and `approvalId`, which
   * the request may have left out or named (then as the authorization's). The one whose hash is the
   * stored commit hash is the request; undefined if none is.
   */
  async function storedCommit(row: ActionRow): Promise<CommitInput | undefined> {
    const entry = await ledger.entry(row.organization_id, row.commit_id!);
    if (!entry) return undefined;
    const req = JSON.parse(row.request) as Record<string, string>;
    const answer = JSON.parse(row.answer) as AuthorizationAnswer;
    for (const payer of [null, answer.payer]) {
      for (const approvalId of [null, row.approval_id]) {
        const input: CommitInput = {
          actionId: row.action_id,
          sessionId: row.session_id,
          agentId: row.agent_id,
          toolName: req.toolName!,
          category: row.category,
          payer,
          quoteMicros: Number(row.amount_micros),
          actualMicros: Number(entry.amount_micros),
          approvalId,
        };
        if (hashJson(commitRecord(input)) === row.commit_hash) return input;
      }
    }
    return undefined;
  }

  /** Chains the authorization's receipt if it is not yet (a replay completes an earlier failure). */
  async function authorizationReceipt(row: ActionRow, config: EconomicConfig | null) {
    if (row.authorize_receipt_id !== null) return;
    await chainOnce(row.organization_id, row.action_id, 'authorize', row.authorization_id, () =>
      receipts.write(authorizationReceiptOf(row, config)),
    );
  }

  /**
   * The owed receipt of an action's current authorization, chained before the action is decided
   * again (which replaces the row's authorization). It cannot be chained under the ledger lock: on
   * SQLite that transaction holds the database's write lock, which the decision log's writer needs.
   */
  async function earlierAuthorizationReceipt(row: ActionRow, config: EconomicConfig | null, attempt: number) {
    const refused = () =>
      new AppError(
        'service_unavailable',
        `Action "${row.action_id}" is decided again only once the receipt of its earlier authorization is written, and it could not be written yet; send the same request again`,
      );
    // Attempts 1 to EARLIER_RECEIPT_ATTEMPTS write; one more finds it still owed and refuses.
    if (attempt > EARLIER_RECEIPT_ATTEMPTS) throw refused();
    try {
      await authorizationReceipt(row, config);
    } catch (err) {
      if (err instanceof AppError && err.code === 'service_unavailable') throw refused();
      throw err;
    }
  }

  /**
   * Writes one owed receipt of a slot the sweep found, with the claim protocol of requests: a slot
   * without a claim is claimed, a stale claim is taken over (looking first for the receipt its writer
   * may have chained), a fresh one is left to its writer. Answers `stored` when this call stored the
   * receipt, `failed` when the receipt cannot be made (logged), `left` otherwise; throws when the
   * write fails.
   */
  async function repairSlot(
    row: ActionRow,
    slot: ReceiptSlot,
    configOf: (row: ActionRow) => Promise<EconomicConfig | null>,
  ): Promise<'stored' | 'left' | 'failed'> {
    const org = row.organization_id;
    const { entryId, receiptId, claimedAt } = slotOf(row, slot);
    if (entryId === null || receiptId !== null) return 'left';
    const staleBefore = new Date(clock.now().getTime() - RECEIPT_CLAIM_MS).toISOString();
    // A fresh claim belongs to its writer; a stale one is taken over.
    if (claimedAt !== null && claimedAt >= staleBefore) return 'left';
    const takeover = claimedAt !== null;
    let receipt: SpendReceipt;
    if (slot === 'authorize') {
      receipt = authorizationReceiptOf(row, await configOf(row));
    } else {
      const input = await storedCommit(row);
      if (!input) {
        log.error(
          { actionId: row.action_id, organizationId: org },
          'spend commit receipt owed, but its request could not be rebuilt from the stored commit',
        );
        return 'failed';
      }
      receipt = commitReceiptOf(row, input, await configOf(row));
    }
    const at = now();
    if (!(await ledger.claimReceipt(org, row.action_id, slot, entryId, at, takeover ? staleBefore : null)))
      return 'left';
    await writeClaimed(org, row.action_id, slot, entryId, at, takeover, () => receipts.write(receipt));
    return 'stored';
  }

  /** Actions (organization and id) whose owed receipt the sweep failed to chain, and until when it leaves them. */
  const repairFailedUntil = new Map<string, number>();
  const actionKey = (row: ActionRow) => JSON.stringify([row.organization_id, row.action_id]);

  /** Decides afresh under the ledger lock and appends the authorization (and its reservation). */
  async function decide(
    tx: LedgerTx,
    scope: Caller,
    input: AuthorizeInput,
    ctx: {
      config: EconomicConfig | null;
      authority: Authority;
      approvalsAvailable: boolean;
      existing: ActionRow | undefined;
      approved: ApprovalRow | null;
      forced?: AuthorizationOutcome;
      /** Said before the decision's message (why the action is decided again). */
      preface?: string;
    },
  ): Promise<Fresh> {
    const { config } = ctx;
    const payer = input.payer ?? config?.defaultPayer ?? null;
    const keys = keysFor(input, config, tx.now);
    const usage = await tx.usage(keys);
    const outcome =
      ctx.forced ??
      decideAuthorization({
        config,
        quoteMicros: input.quoteMicros,
        maxAcceptableMicros: input.maxAcceptableMicros,
        payer,
        category: input.category,
        usage,
        approvalsAvailable: ctx.approvalsAvailable,
        approved: ctx.approved !== null,
      });
    const approvals = createApprovalRepository(tx.db);
    let approvalId: string | null = null;
    let approval: ApprovalRow | null = null;
    if (outcome.reasonCode === 'approval_granted' && ctx.approved) {
      // Claimed in this transaction: the approval is used exactly when the reservation is made, and
      // only for the action as it is done now (the payer resolved now among its arguments).
      const used = await approvals.use(
        tx.organizationId,
        ctx.approved.id,
        { toolName: input.toolName, argumentHash: argumentHash(approvalArguments(input, payer)) },
        tx.now,
      );
      if (!used)
        throw new AppError(
          'conflict',
          `Approval ${ctx.approved.id} was used meanwhile; send the request again`,
        );
      approvalId = ctx.approved.id;
    } else if (outcome.decision === 'require_approval') {
      approvalId = uuidv7();
    } else if (outcome.reasonCode === 'approval_denied' || outcome.reasonCode === 'approval_invalid') {
      // The approval that decided it: the answer and its receipt name it.
      approvalId = ctx.existing?.approval_id ?? null;
    }
    const windowSeconds = approvalWindowOf(config);
    const expiresAt =
      outcome.decision === 'allow' ? new Date(Date.parse(tx.now) + windowSeconds * 1000).toISOString() : null;
    const common = {
      project_id: scope.projectId,
      action_id: input.actionId,
      session_id: input.sessionId,
      agent_id: input.agentId,
      category: input.category,
      payer,
      tool_name: input.toolName,
      amount_micros: input.quoteMicros,
      agent_window: keys.agentWindow,
      category_window: keys.categoryWindow,
    };
    const entries = await tx.append([
      {
        ...common,
        kind: 'authorization',
        decision: outcome.decision,
        reason_code: outcome.reasonCode,
        approval_id: approvalId,
      },
      ...(outcome.decision === 'allow'
        ? [{ ...common, kind: 'reservation' as const, approval_id: approvalId, expires_at: expiresAt }]
        : []),
    ]);
    if (outcome.decision === 'require_approval') {
      approval = pendingApprovalRow(
        scope,
        {
          id: approvalId!,
          decisionId: entries[0]!.id,
          toolName: input.toolName,
          arguments: approvalArguments(input, payer),
          expiresInSeconds: windowSeconds,
          escalation: {
            source: 'economic',
            policy: `spend budgets (${ctx.authority === 'organization+project' ? "the organization's and the project's" : `the ${ctx.authority}'s`} economic configuration)`,
            constraint: outcome.message,
          },
          // Spend approvals record the asking key only: requested_by stays null.
          ...requesterOf(scope.principal),
          requestedBy: null,
        },
        new Date(tx.now),
      );
      await approvals.insert(approval);
    }
    const after = outcome.decision === 'allow' ? withReserved(usage, input.quoteMicros) : usage;
    const answer: AuthorizationAnswer = {
      actionId: input.actionId,
      decision: outcome.decision,
      reasonCode: outcome.reasonCode,
      message: ctx.preface ? `${ctx.preface}: ${outcome.message}` : outcome.message,
      authority: ctx.authority,
      payer,
      quotedSpendUsd: toUsd(input.quoteMicros),
      budget: budgetOf(config, after, input.budgetScopes, input.category, tx.now),
      ...(approvalId !== null ? { approvalId } : {}),
      ...(expiresAt ? { reservationExpiresAt: expiresAt } : {}),
    };
    const row: ActionRow = {
      organization_id: tx.organizationId,
      action_id: input.actionId,
      project_id: scope.projectId,
      request_hash: hashJson(requestRecord(input)),
      request: JSON.stringify(requestRecord(input)),
      state: STATE_OF[outcome.decision],
      answer: JSON.stringify(answer),
      approval_id: approvalId,
      authorization_id: entries[0]!.id,
      reservation_id: entries[1]?.id ?? null,
      amount_micros: input.quoteMicros,
      session_id: input.sessionId,
      agent_id: input.agentId,
      category: input.category,
      agent_window: keys.agentWindow,
      category_window: keys.categoryWindow,
      expires_at: expiresAt,
      decided_at: tx.now,
      authorize_receipt_id: null,
      authorize_receipt_claimed_at: null,
      commit_id: null,
      commit_hash: null,
      commit_answer: null,
      commit_receipt_id: null,
      commit_receipt_claimed_at: null,
      created_at: ctx.existing?.created_at ?? tx.now,
    };
    await tx.putAction(row, ctx.existing !== undefined);
    return { kind: 'fresh', row, answer, approval };
  }

  async function simulate(
    scope: Caller,
    input: AuthorizeInput,
    config: EconomicConfig | null,
    authority: Authority,
  ) {
    const approvalsAvailable = approvalsAllowed(await tierOf(scope));
    return ledger.locked(scope.organizationId, now, async (tx) => {
      const payer = input.payer ?? config?.defaultPayer ?? null;
      const usage = await tx.usage(keysFor(input, config, tx.now));
      const outcome = decideAuthorization({
        config,
        quoteMicros: input.quoteMicros,
        maxAcceptableMicros: input.maxAcceptableMicros,
        payer,
        category: input.category,
        usage,
        approvalsAvailable,
        approved: false,
      });
      const answer: AuthorizationAnswer = {
        actionId: input.actionId,
        // A live call would wait for a person; the simulation answers what would follow approval.
        decision: outcome.decision === 'require_approval' ? 'allow' : outcome.decision,
        reasonCode: outcome.reasonCode,
        message: outcome.message,
        authority,
        payer,
        quotedSpendUsd: toUsd(input.quoteMicros),
        budget: budgetOf(config, usage, input.budgetScopes, input.category, tx.now),
        provisional: true,
      };
      return answer;
    });
  }

  return {
    async config(scope: Caller): Promise<ConfigAnswer> {
      return (await loadEffective(configs, scope)).answer;
    },

    async putConfig(scope: Caller, body: ConfigInput): Promise<ConfigAnswer> {
      await saveConfig(configs, scope, body, now());
      return (await loadEffective(configs, scope)).answer;
    },

    async authorize(scope: Caller, input: AuthorizeInput): Promise<AuthorizationAnswer> {
      const { effective: config, authority } = await loadEffective(configs, scope);
      if (input.mode === 'simulation') return simulate(scope, input, config, authority);
      const approvalsAvailable = approvalsAllowed(await tierOf(scope));
      const hash = hashJson(requestRecord(input));
      const step = async (tx: LedgerTx): Promise<Fresh | Replay | Owed> => {
        const existing = ownAction(scope, await tx.action(input.actionId));
        const base = { config, authority, approvalsAvailable, existing, approved: null };
        // Deciding again replaces the row's authorization: not before that one's receipt is chained.
        const again = (ctx: Parameters<typeof decide>[3]): Promise<Fresh> | Owed =>
          existing && existing.authorize_receipt_id === null
            ? { kind: 'owed', row: existing }
            : decide(tx, scope, input, ctx);
        if (!existing) {
          if (input.approvalId !== null) {
            throw new AppError(
              'validation_failed',
              `body/approvalId: action "${input.actionId}" has no approval; authorize it without one first`,
            );
          }
          return decide(tx, scope, input, base);
        }
        if (existing.request_hash !== hash) {
          throw conflict(
            input.actionId,
            'authorized',
            differing(JSON.parse(existing.request), requestRecord(input)),
          );
        }
        if (input.approvalId !== null && input.approvalId !== existing.approval_id) {
          throw new AppError(
            'validation_failed',
            `body/approvalId: ${input.approvalId} is not the approval of action "${input.actionId}"`,
          );
        }
        if (existing.state !== 'pending_approval') {
          // An answer stands until its reservation lapsed; then the action is decided again.
          return existing.state === 'expired' ? again(base) : { kind: 'replay', row: existing };
        }
        const approval = await createApprovalRepository(tx.db).get(tx.organizationId, existing.approval_id!);
        const status = approval ? statusAt(approval, tx.now) : 'expired';
        if (status === 'pending') return { kind: 'replay', row: existing };
        if (status === 'denied') {
          return again({
            ...base,
            forced: {
              decision: 'deny',
              reasonCode: 'approval_denied',
              message: `Approval ${existing.approval_id} was denied by ${approval!.resolved_by}`,
            },
          });
        }
        if (status === 'approved' && approval!.used_at === null) {
          // Approved: usable once, within approvalWindowSeconds of its approval; past that it lapsed,
          // and the action is decided again as if it had none (a new approval if one is needed).
          const until = usableUntil(approval!, config);
          if (Date.parse(until) <= Date.parse(tx.now)) {
            return again({
              ...base,
              preface: `Approval ${approval!.id} (approved at ${approval!.resolved_at ?? approval!.created_at}) lapsed unused at ${until}, ${approvalWindowOf(config)} s after it was approved; the action is decided again`,
            });
          }
          // The agent presents the approval to use it.
          if (input.approvalId === null) return { kind: 'replay', row: existing };
          // It must be the action as it would be done now: what resolves from the configuration
          // (the default payer) may have changed since the person approved it.
          const payer = input.payer ?? config?.defaultPayer ?? null;
          const mismatch = approvalMismatch(approval!, input.toolName, approvalArguments(input, payer));
          if (mismatch !== null) {
            return again({
              ...base,
              forced: { decision: 'deny', reasonCode: 'approval_invalid', message: mismatch },
            });
          }
          return again({ ...base, approved: approval! });
        }
        // Expired without a decision (or used and lapsed): decided again, with a new approval if needed.
        return again(base);
      };
      let result = await ledger.locked(scope.organizationId, now, step);
      for (let attempt = 1; result.kind === 'owed'; attempt++) {
        await earlierAuthorizationReceipt(result.row, config, attempt);
        result = await ledger.locked(scope.organizationId, now, step);
      }
      if (result.kind === 'replay') {
        await authorizationReceipt(result.row, config);
        return JSON.parse(result.row.answer) as AuthorizationAnswer;
      }
      const { answer, approval, row } = result;
      if (approval) {
        events.publish({
          organizationId: scope.organizationId,
          type: 'approval.created',
          data: { approvalId: approval.id, toolName: approval.tool_name, decisionId: approval.decision_id },
        });
        events.publish({
          organizationId: scope.organizationId,
          type: 'economic.approval_required',
          data: {
            approvalId: approval.id,
            actionId: input.actionId,
            sessionId: input.sessionId,
            agentId: input.agentId,
            toolName: input.toolName,
            category: input.category,
            payer: answer.payer,
            quotedSpendUsd: answer.quotedSpendUsd,
            projectId: scope.projectId,
            expiresAt: approval.expires_at,
          },
        });
      }
      await authorizationReceipt(row, config);
      return answer;
    },

    async commit(scope: Caller, input: CommitInput): Promise<CommitAnswer> {
      const { effective: config, authority } = await loadEffective(configs, scope);
      const hash = hashJson(commitRecord(input));
      const result = await ledger.locked(scope.organizationId, now, async (tx) => {
        const a = ownAction(scope, await tx.action(input.actionId));
        if (!a) throw notFound(`Authorization of action "${input.actionId}"`);
        if (a.commit_hash !== null) {
          if (a.commit_hash === hash) return { fresh: false, row: a };
          throw new AppError(
            'action_conflict',
            `Action "${input.actionId}" was already committed with different content; a commit is final`,
          );
        }
        if (a.state === 'expired') {
          throw new AppError(
            'reservation_expired',
            `The reservation of action "${input.actionId}" expired at ${a.expires_at}; authorize the action again`,
          );
        }
        const answer = JSON.parse(a.answer) as AuthorizationAnswer;
        if (a.state !== 'reserved') {
          throw new AppError(
            'action_not_authorized',
            `Action "${input.actionId}" is not authorized (its answer is ${answer.decision}, ${answer.reasonCode}); nothing to commit`,
          );
        }
        const req = JSON.parse(a.request) as Record<string, unknown>;
        const mismatched = [
          ...(['sessionId', 'agentId', 'toolName', 'category'] as const).filter((k) => req[k] !== input[k]),
          ...(input.payer !== null && input.payer !== answer.payer ? ['payer'] : []),
          ...(input.quoteMicros !== Number(a.amount_micros) ? ['quotedSpendUsd'] : []),
          ...(input.approvalId !== null && input.approvalId !== a.approval_id ? ['approvalId'] : []),
        ];
        if (mismatched.length > 0) {
          throw new AppError(
            'action_conflict',
            `The commit does not match the authorization of action "${input.actionId}" (${mismatched.join(', ')})`,
          );
        }
        const common = {
          project_id: a.project_id,
          action_id: a.action_id,
          reservation_id: a.reservation_id,
          session_id: a.session_id,
          agent_id: a.agent_id,
          category: a.category,
          payer: answer.payer,
          tool_name: input.toolName,
          approval_id: a.approval_id,
          agent_window: a.agent_window,
          category_window: a.category_window,
        };
        const entries = await tx.append([
          { ...common, kind: 'commit', amount_micros: input.actualMicros, decision: 'economic_committed' },
          { ...common, kind: 'release', amount_micros: Number(a.amount_micros) },
        ]);
        const usage = await tx.usage({
          sessionId: a.session_id,
          agentId: a.agent_id,
          category: a.category,
          agentWindow: a.agent_window,
          categoryWindow: a.category_window,
        });
        const overrun = Math.max(0, input.actualMicros - input.quoteMicros);
        const commitAnswer: CommitAnswer = {
          actionId: a.action_id,
          status: 'committed',
          authority,
          category: a.category,
          payer: answer.payer,
          quotedSpendUsd: toUsd(input.quoteMicros),
          actualSpendUsd: toUsd(input.actualMicros),
          overrunUsd: toUsd(overrun),
          approvalId: a.approval_id,
          reasonCode: 'economic_committed',
          message:
            overrun > 0
              ? `Committed ${formatUsd(input.actualMicros)}, ${formatUsd(overrun)} over the quote of ${formatUsd(input.quoteMicros)}; the whole amount counts against the budgets`
              : `Committed ${formatUsd(input.actualMicros)} of the ${formatUsd(input.quoteMicros)} reserved; the reservation is released`,
          budget: budgetOf(
            config,
            usage,
            (req.budgetScopes as BudgetScope[]) ?? BUDGET_SCOPES,
            a.category,
            tx.now,
          ),
        };
        const settled = {
          state: 'committed',
          commit_id: entries[0]!.id,
          commit_hash: hash,
          commit_answer: JSON.stringify(commitAnswer),
        };
        await tx.updateAction(a.action_id, settled);
        return { fresh: true, row: { ...a, ...settled } };
      });
      const { row } = result;
      const answer = JSON.parse(row.commit_answer!) as CommitAnswer;
      if (result.fresh) {
        events.publish({
          organizationId: scope.organizationId,
          type: 'economic.committed',
          data: {
            actionId: answer.actionId,
            sessionId: row.session_id,
            agentId: row.agent_id,
            toolName: input.toolName,
            category: answer.category,
            payer: answer.payer,
            quotedSpendUsd: answer.quotedSpendUsd,
            actualSpendUsd: answer.actualSpendUsd,
            overrunUsd: answer.overrunUsd,
            approvalId: answer.approvalId,
            projectId: row.project_id,
          },
        });
      }
      if (row.commit_receipt_id === null) {
        await chainOnce(scope.organizationId, row.action_id, 'commit', row.commit_id!, () =>
          receipts.write(commitReceiptOf(row, input, config)),
        );
      }
      return answer;
    },

    /**
     * Chains the receipts actions owe (an authorization or commit whose receipt write failed and was
     * not sent again, or whose process died between the ledger's commit and the receipt), oldest
     * first, one page per pass; runs at startup and then periodically. Several processes may sweep at
     * once: each slot is claimed as requests claim it, so it gets one receipt. The configuration bound
     * is the one in effect for the action's project now, as for a request sent again. Never throws
     * for one action (it is logged and retried by a later pass); `stop` ends the pass early. An
     * action that failed is left out of this service's passes for REPAIR_RETRY_MS, so the page
     * reaches newer actions. Answers how many receipts it stored.
     */
    async repairReceipts(options: { limit?: number; stop?: () => boolean } = {}): Promise<number> {
      const nowMs = clock.now().getTime();
      const staleBefore = new Date(nowMs - RECEIPT_CLAIM_MS).toISOString();
      for (const [key, until] of repairFailedUntil) if (until <= nowMs) repairFailedUntil.delete(key);
      const limit = options.limit ?? REPAIR_PAGE;
      // Read past the actions left after a failure: they are not counted in the page.
      const rows = (await ledger.owingReceipts(staleBefore, limit + repairFailedUntil.size))
        .filter((row) => !repairFailedUntil.has(actionKey(row)))
        .slice(0, limit);
      const effective = new Map<string, Promise<EconomicConfig | null>>();
      const configOf = (row: ActionRow) => {
        const key = JSON.stringify([row.organization_id, row.project_id]);
        let config = effective.get(key);
        if (!config) {
          config = loadEffective(configs, {
            organizationId: row.organization_id,
            projectId: row.project_id,
          }).then((r) => r.effective);
          effective.set(key, config);
        }
        return config;
      };
      let repaired = 0;
      for (const row of rows) {
        let failed = false;
        for (const slot of ['authorize', 'commit'] as const) {
          if (options.stop?.()) return repaired;
          try {
            const done = await repairSlot(row, slot, configOf);
            if (done === 'stored') repaired++;
            if (done === 'failed') failed = true;
          } catch (err) {
            failed = true;
            log.error(
              { err, actionId: row.action_id, organizationId: row.organization_id },
              `spend ${slot === 'authorize' ? 'authorization' : 'commit'} receipt repair failed; it will be retried`,
            );
          }
        }
        if (failed) repairFailedUntil.set(actionKey(row), nowMs + REPAIR_RETRY_MS);
      }
      return repaired;
    },

    async status(
      scope: Caller,
      input: { sessionId: string; agentId: string; category?: string },
    ): Promise<StatusAnswer> {
      const { effective: config, authority } = await loadEffective(configs, scope);
      try {
        return await ledger.locked(scope.organizationId, now, async (tx) => {
          const category = input.category ?? '';
          const usage = await tx.usage(keysFor({ ...input, category }, config, tx.now));
          const scopes: BudgetScope[] =
            input.category === undefined ? ['session', 'agent'] : [...BUDGET_SCOPES];
          return {
            enabled: config !== null,
            authority,
            healthy: true,
            pendingApprovals: await tx.pendingApprovals(input.sessionId, input.agentId),
            budget: budgetOf(config, usage, scopes, category, tx.now),
          };
        });
      } catch (err) {
        log.error({ err }, 'spend ledger could not be read');
        return { enabled: config !== null, authority, healthy: false, pendingApprovals: [], budget: null };
      }
    },
  };
}

export type BudgetService = ReturnType<typeof createBudgetService>;
