import { randomBytes } from 'node:crypto';
import {
  type BeneficiaryDetails,
  CAPSULE_VERSION,
  type CapsulePayload,
  capsuleSigningInput,
  compactCapsule,
  fromBase64url,
  payloadProblems,
  verifyCapsule,
} from '@svc/capsules';
import { windowStart } from '@svc/policy-engine';
import type { EventBus } from '../../events/bus.js';
import { hashJson } from '../../ledger/canonical.js';
import { argumentHash } from '../../ledger/receipt.js';
import type { DecisionWriter } from '../../ledger/writer.js';
import type { Clock } from '../../lib/clock.js';
import { AppError } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import type { SigningKeySet } from '../../signing/keyset.js';
import type { Db } from '../../storage/db.js';
import {
  type ApprovalAction,
  approvalsAllowed,
  type Escalation,
  pendingApprovalRow,
  requesterOf,
  statusAt,
  stepsOf,
} from '../approvals/model.js';
import { createApprovalRepository } from '../approvals/repository.js';
import type { ApprovalService } from '../approvals/service.js';
import { loadEffective } from '../budgets/config.js';
import type { EconomicConfigRepository, LedgerTx, SpendLedger } from '../budgets/repository.js';
import {
  type ConsumeFlowDeps,
  commitFlow,
  endAttempt,
  type FlowFacts,
  prepareConsume,
  type Route,
  sendAttempt,
  startAttempt,
} from './consume-flow.js';
import { checkEntityId } from './entity-id.js';
import { flowError, type PaymentRow, type WorkflowRow } from './flow-model.js';
import { createInvoiceRepository, createInvoiceService } from './invoices.js';
import { approvedUseBy, CAPSULE_APPROVAL_TOOL, pastUseBy, reusableApproval } from './mint-approvals.js';
import {
  type CapsuleAnswer,
  type Consumption,
  gatewayError,
  type PackAnswer,
  type PackContent,
  type PayeeAnswer,
} from './model.js';
import { fromMicros, moneyMicros, paymentMicros } from './money.js';
import { evaluateConditions, type PackInput, packContent, packJson, packSha256 } from './packs.js';
import { hashDetails } from './payee-details.js';
import { createPaymentRepository } from './providers.js';
import {
  type CapsuleRow,
  createGatewayRepository,
  type GatewayRepository,
  type PackRow,
  type PayeeRow,
} from './repository.js';
import { createWorkflowRepository, visibleTo as workflowVisibleTo } from './workflows.js';

export interface PaymentServiceDeps {
  repo: GatewayRepository;
  ledger: SpendLedger;
  configs: EconomicConfigRepository;
  writer: Pick<DecisionWriter, 'write'>;
  /** Resolves capsule approvals (those a mint above the pack's threshold opens in the common queue). */
  approvals: Pick<ApprovalService, 'resolve'>;
  /** Announces the approvals a mint opens (`approval.created`), once their insert committed. */
  events: Pick<EventBus, 'publish'>;
  /** Runs `fn` in one transaction of the store (the approval's use and the capsule's insert). */
  transaction<T>(fn: (db: Db) => Promise<T>): Promise<T>;
  tierOf: (organizationId: string) => Promise<string>;
  signing: Pick<SigningKeySet, 'signNaming' | 'published'>;
  /** The store's handle, for reading approvals. */
  store: Db;
  clock: Clock;
  issuer: string;
  log: { error(obj: object, msg: string): void };
  /** Invoices, workflows and the provider hand-off of a consume. */
  flow: ConsumeFlowDeps;
}

type Caller = Pick<OrgScope, 'organizationId' | 'projectId' | 'principal'>;

/** Ledger category and tool name under which consumed payments count in budgets. */
export const GATEWAY_CATEGORY = 'gateway';
const GATEWAY_TOOL = 'gateway.consume';
const DAY = 86_400_000;
/** A receipt claim older than this belongs to a writer that died: a repair may take it over. */
const RECEIPT_CLAIM_MS = 60_000;

export interface MintInput {
  entity_id: string;
  agent_id: string;
  pack_id: string;
  pack_version?: number;
  rails: string[];
  beneficiary: { payee_id: string } | { details: BeneficiaryDetails };
  amount_ceiling: { currency: string; amount: string };
  ttl_seconds: number;
  invoice_hash?: string;
  workflow_id?: string;
  /** The approved approval this mint is made under. */
  approval_ref?: string;
}

export { CAPSULE_APPROVAL_TOOL };

export interface ConsumeInput {
  capsule: string;
  amount: string;
  currency: string;
  rail: string;
  beneficiary: BeneficiaryDetails;
  invoice_hash?: string;
}

const packAnswer = (row: PackRow): PackAnswer => ({
  pack_id: row.pack_id,
  version: Number(row.version),
  sha256: row.sha256,
  created_at: row.created_at,
  ...(JSON.parse(row.content) as PackContent),
});

const payeeAnswer = (row: PayeeRow): PayeeAnswer => ({
  id: row.id,
  beneficiary_hash: row.beneficiary_hash,
  details: JSON.parse(row.details),
  held: Number(row.held) === 1,
  quarantine: { lifted_at: row.quarantine_lifted_at, lifted_by: row.quarantine_lifted_by },
  created_at: row.created_at,
  updated_at: row.updated_at,
});

const capsuleAnswer = (row: CapsuleRow): CapsuleAnswer => ({
  id: row.id,
  capsule: row.capsule,
  status: row.status,
  payee_id: row.payee_id,
  payload: JSON.parse(row.payload),
  consumption: row.consumption ? (JSON.parse(row.consumption) as Consumption) : null,
  receipt_id: row.receipt_id,
  created_at: row.created_at,
  updated_at: row.updated_at,
});

/** Whether first-time quarantine still applies to a payee under a pack's window. */
function inQuarantine(payee: PayeeRow, pack: PackContent, now: number): boolean {
  if (payee.quarantine_lifted_at !== null) return false;
  return Date.parse(payee.created_at) + pack.quarantine_seconds * 1000 > now;
}

/** The mint body member that sets each payload member a caller chooses. */
const MINT_MEMBER: Record<string, string> = {
  entity_id: 'entity_id',
  agent_id: 'agent_id',
  pack_id: 'pack_id',
  rail_allowlist: 'rails',
  amount_ceiling: 'amount_ceiling',
  'amount_ceiling.currency': 'amount_ceiling.currency',
  'amount_ceiling.amount': 'amount_ceiling.amount',
  expires_at: 'ttl_seconds',
  invoice_hash: 'invoice_hash',
  workflow_id: 'workflow_id',
  approval_ref: 'approval_ref',
};

/**
 * Refuses a payload that `verifyCapsule` would refuse, before it is signed: 400 invalid_request
 * naming the body member, or, for a member the service sets (issuer, ids, hashes), an internal error.
 */
function checkPayload(payload: CapsulePayload): void {
  const problem = payloadProblems(payload)[0];
  if (problem === undefined) return;
  const member = MINT_MEMBER[problem.param];
  if (member !== undefined) throw gatewayError.invalidRequest(problem.message, member);
  throw new Error(`a capsule minted now would not verify (${problem.param}: ${problem.message})`);
}

/**
 * Policy packs, payees and spend capsules. A consume runs under the organization's spend-ledger
 * lock: the nonce claim, the capsule's move to `consumed` and the ledger commit are one transaction,
 * so of concurrent consumes (on any number of processes) exactly one succeeds.
 */
export function createPaymentService(deps: PaymentServiceDeps) {
  const { repo, ledger, clock } = deps;
  const now = () => clock.now().toISOString();

  async function packFor(org: string, packId: string, version?: number): Promise<PackRow> {
    const row =
      version === undefined ? await repo.latestPack(org, packId) : await repo.pack(org, packId, version);
    if (!row) {
      throw gatewayError.packNotFound(
        version === undefined
          ? `policy pack ${packId} not found`
          : `policy pack ${packId} version ${version} not found`,
        version === undefined ? 'pack_id' : 'pack_version',
      );
    }
    return row;
  }

  async function registerPayee(scope: Caller, details: BeneficiaryDetails, param: string) {
    const { normalized, hash } = await hashDetails(details, param);
    const at = now();
    return repo.registerPayee({
      organization_id: scope.organizationId,
      id: uuidv7(),
      beneficiary_hash: hash,
      details: JSON.stringify(normalized),
      held: 0,
      quarantine_lifted_at: null,
      quarantine_lifted_by: null,
      created_at: at,
      updated_at: at,
    });
  }

  async function payeeOf(scope: Caller, id: string): Promise<PayeeRow> {
    const row = await repo.payee(scope.organizationId, id);
    if (!row) throw gatewayError.payeeNotFound(`payee ${id} not found`, 'payee_id');
    return row;
  }

  /** A capsule as its reader may see it: an API key sees its own project's capsules only. */
  async function capsuleOf(scope: Caller, id: string): Promise<CapsuleRow> {
    const row = await repo.capsule(scope.organizationId, id);
    if (!row || (scope.principal.kind === 'apiKey' && row.project_id !== scope.projectId)) {
      throw gatewayError.capsuleNotFound(`capsule ${id} not found`, 'id');
    }
    return row;
  }

  const personOf = (scope: Caller, what: string): string => {
    if (scope.principal.kind !== 'user')
      throw gatewayError.forbidden(`${what} takes a person (user token), not an API key`);
    return scope.principal.userId;
  };

  /** Everything a consume checks before it takes the lock: signature, body, rail, payee hash, amount. */
  async function precheck(scope: Caller, input: ConsumeInput) {
    let keys = await deps.signing.published();
    let check = await verifyCapsule(input.capsule, keys, { now: clock.now() });
    if (!check.ok && check.code === 'capsule_kid_unknown') {
      // Another instance may have just rotated and minted with its new key: read the set again.
      const kid = capsuleKid(input.capsule);
      if (kid !== undefined) {
        keys = await deps.signing.published(kid);
        check = await verifyCapsule(input.capsule, keys, { now: clock.now() });
      }
    }
    let expired = false;
    if (!check.ok && check.code === 'capsule_expired') {
      // A payment handed to a provider before the capsule expired may have been made: its retry
      // (the same key, to the same provider) must stay possible, or the payment is never recorded.
      const signed = await verifyCapsule(input.capsule, keys, { now: new Date(0) });
      if (signed.ok && signed.payload.organization_id === scope.organizationId) {
        const open = await createPaymentRepository(deps.store).get(
          scope.organizationId,
          signed.payload.capsule_id,
        );
        if (open?.state === 'pending' || open?.state === 'unknown') {
          check = signed;
          expired = true;
        }
      }
    }
    if (!check.ok) {
      const map = {
        capsule_payload_invalid: gatewayError.payloadInvalid,
        capsule_kid_unknown: gatewayError.kidUnknown,
        capsule_signature_invalid: gatewayError.signature,
        capsule_expired: gatewayError.expired,
      } as const;
      throw map[check.code](check.message, check.param);
    }
    const p = check.payload;
    if (p.organization_id !== scope.organizationId) {
      throw gatewayError.payloadInvalid('the capsule was not issued to this organization', 'organization_id');
    }
    if (p.issuer !== deps.issuer) {
      // Instances that do not share SVC_BASE_URL issue capsules under different names (deploy.md).
      throw gatewayError.payloadInvalid(
        `the capsule was issued by ${JSON.stringify(p.issuer)}, not by this service (${JSON.stringify(deps.issuer)})`,
        'issuer',
      );
    }
    // A body member that fails validation answers capsule_payload_invalid (param: the member).
    const invalid = gatewayError.payloadInvalid;
    const amountMicros = paymentMicros({ currency: input.currency, amount: input.amount }, '', invalid);
    if (input.currency !== p.amount_ceiling.currency) {
      throw invalid(`currency must be the capsule's (${p.amount_ceiling.currency})`, 'currency');
    }
    if (!p.rail_allowlist.includes(input.rail)) {
      throw gatewayError.rail(`rail ${input.rail} is not in the capsule's rail_allowlist`, 'rail');
    }
    const { hash } = await hashDetails(input.beneficiary, 'beneficiary', invalid);
    if (hash !== p.beneficiary) {
      throw gatewayError.hashMismatch(
        "the beneficiary details do not hash to the capsule's beneficiary",
        'beneficiary',
      );
    }
    const ceilingMicros = moneyMicros(p.amount_ceiling, 'amount_ceiling');
    if (amountMicros > ceilingMicros) {
      throw gatewayError.overCeiling(
        `amount ${input.amount} is above the capsule's ceiling ${p.amount_ceiling.amount} ${p.amount_ceiling.currency}`,
        'amount',
      );
    }
    if (input.invoice_hash !== p.invoice_hash) {
      // A consume names exactly the invoice its capsule binds: none when it binds none.
      throw invalid(
        p.invoice_hash === undefined
          ? 'the capsule binds no invoice; consume without invoice_hash'
          : 'invoice_hash must be the one the capsule binds',
        'invoice_hash',
      );
    }
    return { payload: p, amountMicros, ceilingMicros, expired };
  }

  /**
   * The approval a mint needs (`required` distinct approvers: 2 under dual control): without
   * approval_ref the requester's live approval of this very payload is named, or else one is opened
   * (409 approval_required or dual_control_required); with one, it must be approved by as many
   * people, within its use-by, unused and bound to this very payload. Answers the approval's id.
   */
  async function checkApproval(
    scope: Caller,
    ref: string | undefined,
    approvalPayload: Record<string, unknown>,
    payloadHash: string,
    escalation: Escalation,
    required: number,
  ): Promise<string> {
    const tier =
      scope.principal.kind === 'apiKey' ? scope.principal.tier : await deps.tierOf(scope.organizationId);
    if (!approvalsAllowed(tier)) {
      throw gatewayError.approvalsUnavailable(
        `this capsule needs a person's approval, and approvals need the Team plan or above (plan: ${tier})`,
        'amount_ceiling.amount',
      );
    }
    const stillNeeded = (id: string, message: string) =>
      required > 1
        ? gatewayError.dualControlRequired(id, payloadHash, message)
        : gatewayError.approvalRequired(id, payloadHash, message);
    if (ref === undefined) {
      // The same mint sent again names the approval it opened: under the organization's spend-ledger
      // lock, so concurrent mints of one payload (on any instance) open one approval between them.
      const org = scope.organizationId;
      const { row, opened } = await ledger.locked(org, now, async (tx) => {
        const found = await reusableApproval(tx.db, scope, payloadHash, required, tx.now);
        if (found) return { row: found, opened: false };
        const fresh = pendingApprovalRow(
          scope,
          {
            decisionId: null,
            toolName: CAPSULE_APPROVAL_TOOL,
            arguments: approvalPayload,
            ...requesterOf(scope.principal),
            escalation,
            requiredApprovals: required,
          },
          new Date(tx.now),
        );
        await createApprovalRepository(tx.db).insert(fresh);
        return { row: fresh, opened: true };
      });
      if (opened) {
        deps.events.publish({
          organizationId: org,
          type: 'approval.created',
          data: { approvalId: row.id, toolName: row.tool_name, decisionId: row.decision_id },
        });
      }
      if (row.status === 'approved') {
        throw stillNeeded(
          row.id,
          `approval ${row.id} of this capsule is approved: mint again with approval_ref ${row.id} (usable until ${approvedUseBy(row)})`,
        );
      }
      throw stillNeeded(
        row.id,
        required > 1
          ? "the ceiling is at or above the pack's dual_control_threshold_usd: two people other than the requester must approve this capsule"
          : "the ceiling is at or above the pack's approval_threshold_usd: a person must approve this capsule",
      );
    }
    const approvals = createApprovalRepository(deps.store);
    const row = await approvals.get(scope.organizationId, ref);
    // An API key mints only under approvals its own project's keys opened (or people did).
    if (
      !row ||
      (scope.principal.kind === 'apiKey' &&
        row.requested_by_key_id !== null &&
        row.project_id !== scope.projectId)
    ) {
      throw gatewayError.approvalNotFound(`approval ${ref} not found`, 'approval_ref');
    }
    if (row.tool_name !== CAPSULE_APPROVAL_TOOL || row.argument_hash !== payloadHash) {
      throw gatewayError.approvalPayloadMismatch(
        row.tool_name === CAPSULE_APPROVAL_TOOL ? row.argument_hash : payloadHash,
        `approval ${ref} was raised for a different capsule request`,
      );
    }
    if (Number(row.required_approvals) < required) {
      throw gatewayError.approvalPayloadMismatch(
        row.argument_hash,
        `approval ${ref} needs ${row.required_approvals} approver(s); this capsule is under dual control and needs ${required}: mint without approval_ref to open one`,
      );
    }
    const status = statusAt(row, now());
    if (status === 'pending') {
      const given = stepsOf(row).length;
      throw stillNeeded(
        ref,
        `approval ${ref} is still pending (${given} of ${row.required_approvals} approvals)`,
      );
    }
    if (status === 'denied')
      throw gatewayError.approvalDenied(`approval ${ref} was denied by ${row.resolved_by}`, 'approval_ref');
    if (status === 'expired')
      throw gatewayError.approvalExpired(`approval ${ref} expired at ${row.expires_at}`, 'approval_ref');
    if (row.used_at !== null)
      throw gatewayError.approvalConsumed(
        `approval ${ref} was already used at ${row.used_at}`,
        'approval_ref',
      );
    // An approval lets its capsule be minted soon after the approval, not whenever the agent returns.
    if (pastUseBy(row, now())) {
      throw gatewayError.approvalExpired(
        `approval ${ref} was approved at ${row.resolved_at} and could be used until ${approvedUseBy(row)}; mint without approval_ref to ask again`,
        'approval_ref',
      );
    }
    return ref;
  }

  /** The invoice and workflow a mint binds must exist and agree with the capsule. */
  async function checkBindings(scope: Caller, input: MintInput, beneficiary: string): Promise<void> {
    const org = scope.organizationId;
    if (input.invoice_hash !== undefined) {
      await createInvoiceService({ repo: createInvoiceRepository(deps.store), clock }).checkMint(
        org,
        input.invoice_hash,
        beneficiary,
        input.amount_ceiling,
      );
    }
    if (input.workflow_id !== undefined) {
      const workflow = await createWorkflowRepository(deps.store).get(
        org,
        input.entity_id,
        input.workflow_id,
      );
      // An API key binds only its own project's workflows (it cannot see the others).
      if (!workflow || !workflowVisibleTo(scope, workflow)) {
        throw flowError.workflowNotFound(
          `workflow ${input.workflow_id} of entity ${input.entity_id} not found`,
          'workflow_id',
          'POST /v1/gateway/workflows first',
        );
      }
    }
  }

  /**
   * Chains the receipt of a committed consume and records it on the capsule; with `lookFirst`, a
   * receipt already chained for the consume's ledger entry (written before a failure) is reused.
   */
  async function writeReceipt(
    row: CapsuleRow,
    p: CapsulePayload,
    consumption: Consumption,
    pack: PackRow,
    lookFirst: boolean,
  ): Promise<string> {
    const org = row.organization_id;
    const found = lookFirst ? await repo.receiptFor(org, consumption.ledger_entry_id) : undefined;
    const receiptId =
      found ??
      (
        await deps.writer.write({
          receipt: {
            organization_id: org,
            project_id: row.project_id,
            decision_id: consumption.ledger_entry_id,
            decision: 'allow',
            mode: null,
            tool_name: GATEWAY_TOOL,
            argument_hash: hashJson({ capsule_id: p.capsule_id, ...consumption }),
            policy_version: Number(pack.version),
            policy_hash: pack.sha256,
            reason: `capsule_consumed: ${consumption.amount} ${consumption.currency} over ${consumption.rail} (${consumption.payment?.reference})`,
            timestamp: consumption.consumed_at,
            source: 'gateway',
            action_id: `capsule:${p.capsule_id}`,
            amount_micros: moneyMicros(
              { currency: consumption.currency, amount: consumption.amount },
              'amount',
            ),
            payer: p.entity_id,
          },
        })
      ).receipt_id;
    await repo.setCapsuleReceipt(org, row.id, receiptId);
    return receiptId;
  }

  /**
   * A consumed capsule whose receipt is missing gets it now, unless another writer holds a fresh
   * claim on it; the row as it then stands. Never throws: a failed repair is retried later.
   */
  async function repairReceipt(row: CapsuleRow): Promise<CapsuleRow> {
    if (row.status !== 'consumed' || row.receipt_id !== null || row.consumption === null) return row;
    const org = row.organization_id;
    const at = now();
    const stale = new Date(clock.now().getTime() - RECEIPT_CLAIM_MS).toISOString();
    try {
      if (!(await repo.claimReceipt(org, row.id, at, stale))) return (await repo.capsule(org, row.id)) ?? row;
    } catch (err) {
      deps.log.error({ err, capsuleId: row.id }, 'capsule receipt repair could not claim the capsule');
      return row;
    }
    try {
      const consumption = JSON.parse(row.consumption) as Consumption;
      const p = JSON.parse(row.payload) as CapsulePayload;
      const pack =
        (await repo.packBySha(org, p.pack_id, p.policy_sha256, consumption.consumed_at)) ??
        (await repo.pack(org, p.pack_id, p.pack_version));
      if (!pack) throw new Error(`policy pack ${p.pack_id} of capsule ${row.id} is gone`);
      const receiptId = await writeReceipt(row, p, consumption, pack, true);
      return { ...row, receipt_id: receiptId, receipt_claimed_at: null };
    } catch (err) {
      await repo.releaseReceipt(org, row.id, at).catch(() => {});
      deps.log.error({ err, capsuleId: row.id }, 'capsule receipt repair failed; it will be retried');
      return row;
    }
  }

  return {
    async putPack(scope: Caller, packId: string, input: PackInput): Promise<PackAnswer> {
      // A pack governs the agents that mint under it: only a person may write one, never their keys.
      personOf(scope, 'writing a policy pack');
      const content = packContent(input);
      // Versions are immutable; a concurrent save of the same pack retries on the next number. Each
      // lost attempt is another save of this pack that succeeded, so every save of a burst of up to
      // 100 at once (people saving, never a hot path) gets its version.
      for (let attempt = 0; attempt < 100; attempt++) {
        const latest = await repo.latestPack(scope.organizationId, packId);
        const row: PackRow = {
          organization_id: scope.organizationId,
          pack_id: packId,
          version: latest ? Number(latest.version) + 1 : 1,
          content: packJson(content),
          sha256: packSha256(content),
          created_at: now(),
        };
        if (await repo.insertPack(row)) return packAnswer(row);
      }
      throw gatewayError.unavailable('the pack is being saved concurrently; send the request again');
    },

    async getPack(scope: Caller, packId: string, version?: number): Promise<PackAnswer> {
      return packAnswer(await packFor(scope.organizationId, packId, version));
    },

    async registerPayee(scope: Caller, details: BeneficiaryDetails) {
      const { row, created } = await registerPayee(scope, details, 'details');
      return { payee: payeeAnswer(row), created };
    },

    async getPayee(scope: Caller, id: string): Promise<PayeeAnswer> {
      return payeeAnswer(await payeeOf(scope, id));
    },

    async holdPayee(scope: Caller, id: string, held: boolean): Promise<PayeeAnswer> {
      await payeeOf(scope, id);
      // Anyone may stop payments to a payee; only a person may let them flow again.
      if (!held) personOf(scope, 'releasing a held payee');
      return payeeAnswer((await repo.updatePayee(scope.organizationId, id, { held: held ? 1 : 0 }, now()))!);
    },

    async liftQuarantine(scope: Caller, id: string): Promise<PayeeAnswer> {
      const person = personOf(scope, 'lifting a payee quarantine');
      const payee = await payeeOf(scope, id);
      if (payee.quarantine_lifted_at !== null) return payeeAnswer(payee);
      const at = now();
      return payeeAnswer(
        (await repo.updatePayee(
          scope.organizationId,
          id,
          { quarantine_lifted_at: at, quarantine_lifted_by: person },
          at,
        ))!,
      );
    },

    async mint(scope: Caller, input: MintInput): Promise<CapsuleAnswer> {
      // Entity caps count per exact entity id: no id may differ from another only invisibly.
      checkEntityId(input.entity_id);
      const packRow = await packFor(scope.organizationId, input.pack_id, input.pack_version);
      if (input.pack_version !== undefined) {
        // A consume checks the capsule's policy_sha256 against the pack's latest version: a capsule
        // of a version since replaced by other content (an older, maybe laxer pack) could never be
        // spent, so it is not minted.
        const latest = await repo.latestPack(scope.organizationId, input.pack_id);
        if (latest && latest.sha256 !== packRow.sha256) {
          throw gatewayError.packHashMismatch(
            `policy pack ${input.pack_id} version ${input.pack_version} was replaced by version ${Number(latest.version)} (${latest.sha256}); a capsule of it could never be consumed`,
            'pack_version',
            'mint under the latest version: leave pack_version out, or name the latest',
          );
        }
      }
      const pack = JSON.parse(packRow.content) as PackContent;
      const ceilingMicros = paymentMicros(input.amount_ceiling, 'amount_ceiling');
      if (pack.invoice_required && input.invoice_hash === undefined) {
        throw gatewayError.invoiceMissing(
          `policy pack ${input.pack_id} requires an invoice: mint with invoice_hash`,
          'invoice_hash',
        );
      }
      const rails = [...new Set(input.rails)].sort();
      const outside = rails.find((r) => !pack.allowed_rails.includes(r));
      if (outside !== undefined) {
        throw gatewayError.rail(`rail ${outside} is not allowed by policy pack ${input.pack_id}`, 'rails');
      }
      const threshold = (name: 'approval_threshold_usd' | 'dual_control_threshold_usd') =>
        pack[name] !== null && ceilingMicros >= moneyMicros({ currency: 'USD', amount: pack[name]! }, name);
      // Dual control: two distinct people, neither the requester, approve one approval.
      const dual = threshold('dual_control_threshold_usd');
      const needsApproval = dual || threshold('approval_threshold_usd') || input.approval_ref !== undefined;
      const payee =
        'payee_id' in input.beneficiary
          ? await payeeOf(scope, input.beneficiary.payee_id)
          : (await registerPayee(scope, input.beneficiary.details, 'beneficiary.details')).row;
      if (Number(payee.held) === 1) throw gatewayError.held(`payee ${payee.id} is held`, 'beneficiary');
      await checkBindings(scope, input, payee.beneficiary_hash);
      // What a person approves: every member of the capsule that says how much, to whom, how and under what.
      const approvalPayload = {
        entity_id: input.entity_id,
        agent_id: input.agent_id,
        pack_id: packRow.pack_id,
        pack_version: Number(packRow.version),
        policy_sha256: packRow.sha256,
        rail_allowlist: rails,
        beneficiary: payee.beneficiary_hash,
        payee: JSON.parse(payee.details),
        amount_ceiling: input.amount_ceiling,
        invoice_hash: input.invoice_hash ?? null,
        workflow_id: input.workflow_id ?? null,
      };
      const payloadHash = argumentHash(approvalPayload);
      const ttl = Math.min(input.ttl_seconds, pack.max_ttl_seconds);
      const capsulePayload = (issued: Date, approvalRef: string | null): CapsulePayload => ({
        version: CAPSULE_VERSION,
        capsule_id: uuidv7(),
        issuer: deps.issuer,
        organization_id: scope.organizationId,
        entity_id: input.entity_id,
        agent_id: input.agent_id,
        rail_allowlist: rails,
        beneficiary: payee.beneficiary_hash,
        amount_ceiling: { currency: input.amount_ceiling.currency, amount: input.amount_ceiling.amount },
        pack_id: packRow.pack_id,
        pack_version: Number(packRow.version),
        policy_sha256: packRow.sha256,
        issued_at: issued.toISOString(),
        expires_at: new Date(issued.getTime() + ttl * 1000).toISOString(),
        nonce: randomBytes(24).toString('base64url'),
        ...(input.invoice_hash !== undefined ? { invoice_hash: input.invoice_hash } : {}),
        ...(input.workflow_id !== undefined ? { workflow_id: input.workflow_id } : {}),
        ...(approvalRef !== null ? { approval_ref: approvalRef } : {}),
      });
      // Checked before an approval is opened or used: a capsule its verifier refuses is never minted.
      checkPayload(capsulePayload(clock.now(), input.approval_ref ?? null));
      const approvalRef = needsApproval
        ? await checkApproval(
            scope,
            input.approval_ref,
            approvalPayload,
            payloadHash,
            {
              source: 'gateway',
              policy: `policy pack ${packRow.pack_id}, version ${Number(packRow.version)}`,
              constraint: dual
                ? `the amount ceiling ${input.amount_ceiling.amount} ${input.amount_ceiling.currency} is at or above the pack's dual_control_threshold_usd of ${pack.dual_control_threshold_usd}: two people must approve`
                : pack.approval_threshold_usd !== null
                  ? `the amount ceiling ${input.amount_ceiling.amount} ${input.amount_ceiling.currency} is at or above the pack's approval_threshold_usd of ${pack.approval_threshold_usd}`
                  : 'the mint named an approval_ref',
              policyVersion: Number(packRow.version),
            },
            dual ? 2 : 1,
          )
        : null;
      const payload = capsulePayload(clock.now(), approvalRef);
      checkPayload(payload);
      let signingInput = '';
      const signed = await deps.signing.signNaming((kid) => {
        signingInput = capsuleSigningInput(payload, kid);
        return new TextEncoder().encode(signingInput);
      });
      const row: CapsuleRow = {
        organization_id: scope.organizationId,
        id: payload.capsule_id,
        project_id: scope.projectId,
        entity_id: payload.entity_id,
        agent_id: payload.agent_id,
        payee_id: payee.id,
        nonce: payload.nonce,
        payload: JSON.stringify(payload),
        capsule: compactCapsule(signingInput, signed.signature),
        status: 'active',
        expires_at: payload.expires_at,
        consumption: null,
        receipt_id: null,
        receipt_claimed_at: null,
        created_at: payload.issued_at,
        updated_at: payload.issued_at,
      };
      if (approvalRef === null) {
        await repo.insertCapsule(row);
        return capsuleAnswer(row);
      }
      // The approval is used exactly when the capsule exists: both commit or neither does.
      await deps.transaction(async (db) => {
        const used = await createApprovalRepository(db).use(
          scope.organizationId,
          approvalRef,
          { toolName: CAPSULE_APPROVAL_TOOL, argumentHash: payloadHash },
          payload.issued_at,
        );
        if (!used)
          throw gatewayError.approvalConsumed(`approval ${approvalRef} was already used`, 'approval_ref');
        await createGatewayRepository(db).insertCapsule(row);
      });
      return capsuleAnswer(row);
    },

    /**
     * Resolves a capsule approval from the gateway, answering in envelope B: a resolve of an approval
     * already approved or denied, or a second one by the same person (or relaying key) under dual
     * control, is 409 approval_already_resolved.
     */
    async resolveApproval(scope: OrgScope, id: string, action: ApprovalAction, resolvedBy?: string) {
      const row = await createApprovalRepository(deps.store).get(scope.organizationId, id);
      if (!row || row.tool_name !== CAPSULE_APPROVAL_TOOL) {
        throw gatewayError.approvalNotFound(`capsule approval ${id} not found`, 'id');
      }
      try {
        return await deps.approvals.resolve(scope, id, action, resolvedBy);
      } catch (err) {
        if (!(err instanceof AppError)) throw err;
        switch (err.code) {
          case 'invalid_status':
          case 'approval_already_resolved':
            throw gatewayError.approvalResolved(err.message, 'id');
          case 'expired':
            throw gatewayError.approvalExpired(err.message, 'id');
          case 'not_found':
            throw gatewayError.approvalNotFound(`capsule approval ${id} not found`, 'id');
          case 'authorization_error':
            throw gatewayError.forbidden(err.message);
          case 'validation_failed':
            throw gatewayError.invalidRequest(err.message.replace(/^body\//, ''), 'resolvedBy');
          default:
            throw err;
        }
      }
    },

    async getCapsule(scope: Caller, id: string): Promise<CapsuleAnswer> {
      return capsuleAnswer(await repairReceipt(await capsuleOf(scope, id)));
    },

    async revoke(scope: Caller, id: string): Promise<CapsuleAnswer> {
      const row = await capsuleOf(scope, id);
      if (row.status === 'consumed') throw gatewayError.consumed(`capsule ${id} was already consumed`, 'id');
      // Under the consume lock, so a revoke never lands between a provider's answer and its commit.
      const after = await ledger.locked(scope.organizationId, now, async (tx) => {
        const payment = await createPaymentRepository(tx.db).get(scope.organizationId, id);
        if (payment?.state === 'pending' && payment.lease_until > tx.now) {
          throw flowError.paymentInProgress(`a payment of capsule ${id} is in flight`, 1);
        }
        if (payment?.state === 'pending' || payment?.state === 'unknown') {
          // The provider may have paid: the capsule must stay consumable so that payment is recorded.
          throw flowError.paymentUnresolved(
            `capsule ${id} has a payment of unknown outcome; it cannot be revoked until a consume resolves it`,
            'id',
          );
        }
        // Revoking twice is harmless: the second answers the revoked capsule.
        const r = createGatewayRepository(tx.db);
        await r.settleCapsule(scope.organizationId, id, 'revoked', null, tx.now);
        return (await r.capsule(scope.organizationId, id))!;
      });
      if (after.status === 'consumed')
        throw gatewayError.consumed(`capsule ${id} was already consumed`, 'id');
      return capsuleAnswer(after);
    },

    async consume(scope: Caller, input: ConsumeInput): Promise<CapsuleAnswer> {
      const { payload: p, amountMicros, ceilingMicros, expired } = await precheck(scope, input);
      const { effective: config } = await loadEffective(deps.configs, scope);
      const org = scope.organizationId;
      const facts = (pack: PackContent, projectId: string | null): FlowFacts => ({
        org,
        projectId,
        payload: p,
        amountMicros,
        currency: input.currency,
        rail: input.rail,
        invoiceHash: p.invoice_hash ?? null,
        pack,
      });

      /** The one step that spends: nonce, ledger entry, invoice, workflow and status commit together. */
      async function spend(
        tx: LedgerTx,
        row: CapsuleRow,
        latest: PackRow,
        f: FlowFacts,
        route: Route,
        workflow: WorkflowRow | null,
        attempt: PaymentRow | null,
        reference: string | null,
      ) {
        const r = createGatewayRepository(tx.db);
        if (!(await r.claimNonce(org, p.entity_id, p.nonce, p.capsule_id, tx.now))) {
          throw gatewayError.replayed(`nonce already claimed for entity ${p.entity_id}`, 'nonce');
        }
        const [entry] = await tx.append([
          {
            kind: 'commit',
            project_id: row.project_id,
            action_id: `capsule:${p.capsule_id}`,
            session_id: `capsule:${p.capsule_id}`,
            agent_id: p.agent_id,
            category: GATEWAY_CATEGORY,
            payer: p.entity_id,
            tool_name: GATEWAY_TOOL,
            amount_micros: amountMicros,
            decision: 'economic_committed',
            agent_window: windowStart(config?.agentWindow ?? 'day', tx.now),
            category_window: windowStart(config?.categoryWindow ?? 'day', tx.now),
          },
        ]);
        const payment = await commitFlow(tx.db, f, route, workflow, attempt, reference, entry!.id, tx.now);
        const consumption: Consumption = {
          amount: input.amount,
          currency: input.currency,
          rail: input.rail,
          invoice_hash: input.invoice_hash ?? null,
          consumed_at: tx.now,
          ledger_entry_id: entry!.id,
          payment,
        };
        if (!(await r.settleCapsule(org, row.id, 'consumed', JSON.stringify(consumption), tx.now))) {
          throw gatewayError.consumed(`capsule ${row.id} was already consumed`);
        }
        return { row: (await r.capsule(org, row.id))!, consumption, pack: latest };
      }

      const first = await ledger.locked(org, now, async (tx) => {
        const r = createGatewayRepository(tx.db);
        const row = await r.capsule(org, p.capsule_id);
        if (!row) throw gatewayError.payloadInvalid(`capsule ${p.capsule_id} is not known`, 'capsule_id');
        // An API key spends only its own project's capsules, as it reads only those.
        if (scope.principal.kind === 'apiKey' && row.project_id !== scope.projectId) {
          throw gatewayError.capsuleNotFound(`capsule ${p.capsule_id} not found`, 'capsule');
        }
        if (row.status === 'consumed') throw gatewayError.consumed(`capsule ${row.id} was already consumed`);
        if (row.status === 'revoked') throw gatewayError.revoked(`capsule ${row.id} was revoked`);
        const claim = await r.nonceClaim(org, p.entity_id, p.nonce);
        if (claim) throw gatewayError.replayed(`nonce already claimed for entity ${p.entity_id}`, 'nonce');
        // A retry of a payment handed to a provider (of unknown outcome, or pending past its lease)
        // only asks the provider again with the same key: the gates of a new payment (expiry, pack,
        // payee, conditions, entity caps) were passed when it started, and the provider may have paid.
        const open = await createPaymentRepository(tx.db).get(org, p.capsule_id);
        const resuming = open?.state === 'unknown' || open?.state === 'pending';
        if (expired && !resuming) {
          throw gatewayError.expired(`the capsule expired at ${p.expires_at}`, 'expires_at');
        }
        const latest = resuming
          ? await r.pack(org, p.pack_id, p.pack_version)
          : await r.latestPack(org, p.pack_id);
        if (!latest) throw gatewayError.packNotFound(`policy pack ${p.pack_id} not found`, 'pack_id');
        if (!resuming && latest.sha256 !== p.policy_sha256) {
          throw gatewayError.packHashMismatch(
            `policy pack ${p.pack_id} changed (now version ${latest.version}, ${latest.sha256}) since the capsule was minted`,
            'policy_sha256',
          );
        }
        const pack = JSON.parse(latest.content) as PackContent;
        const payee = await r.payee(org, row.payee_id);
        if (!payee) throw gatewayError.payeeNotFound(`payee ${row.payee_id} not found`, 'beneficiary');
        if (!resuming && Number(payee.held) === 1)
          throw gatewayError.held(`payee ${payee.id} is held`, 'beneficiary');
        if (!resuming && inQuarantine(payee, pack, Date.parse(tx.now))) {
          throw gatewayError.quarantine(
            `payee ${payee.id} is a first-time payee in quarantine until a person lifts it or the window ends`,
            'beneficiary',
            `POST /v1/gateway/payees/${payee.id}/lift-quarantine with a user token`,
          );
        }
        if (!resuming)
          evaluateConditions(pack.conditions, {
            amount: amountMicros / 1e6,
            currency: input.currency,
            rail: input.rail,
            entity_id: p.entity_id,
            agent_id: p.agent_id,
            beneficiary: p.beneficiary,
            invoice_hash: input.invoice_hash ?? '',
            ceiling_amount: ceilingMicros / 1e6,
          });
        const f = facts(pack, row.project_id);
        const prepared = await prepareConsume(tx.db, f, tx.now);
        const at = Date.parse(tx.now);
        const windows = [
          ['usd_24h', DAY],
          ['usd_7d', 7 * DAY],
          ['usd_30d', 30 * DAY],
        ] as const;
        const spent = await r.entitySpentSince(
          org,
          p.entity_id,
          windows.map(([, ms]) => new Date(at - ms).toISOString()),
        );
        windows.forEach(([name, _ms], i) => {
          const cap = pack.entity_caps[name];
          if (cap === null || resuming) return;
          const capMicros = moneyMicros({ currency: 'USD', amount: cap }, name);
          // Payments handed to a provider and not yet committed (or of unknown outcome) count too.
          const counted = spent[i]! + prepared.openMicros;
          if (counted + amountMicros > capMicros) {
            throw gatewayError.overEntityCap(
              `entity ${p.entity_id} has spent ${fromMicros(counted)} USD of its ${cap} USD cap (${name}); ${input.amount} more would exceed it`,
              'amount',
            );
          }
        });
        if (prepared.route.kind === 'provider') {
          const payee = JSON.parse((await r.payee(org, row.payee_id))!.details);
          const request = JSON.stringify({
            capsule_id: p.capsule_id,
            entity_id: p.entity_id,
            agent_id: p.agent_id,
            amount: input.amount,
            currency: input.currency,
            rail: input.rail,
            beneficiary: payee,
            invoice_hash: p.invoice_hash ?? null,
            workflow_id: p.workflow_id ?? null,
          });
          const route = prepared.route;
          const attempt = await startAttempt(tx.db, deps.flow, f, { ...prepared, route }, request, tx.now);
          return {
            kind: 'handoff' as const,
            attempt,
            previous: prepared.payment,
            provider: route.provider,
            latest,
            f,
          };
        }
        const done = await spend(tx, row, latest, f, prepared.route, prepared.workflow, null, null);
        return { kind: 'done' as const, ...done };
      });

      let consumed: { row: CapsuleRow; consumption: Consumption; pack: PackRow };
      if (first.kind === 'done') {
        consumed = first;
      } else {
        // The hand-off runs outside the lock; the attempt's lease keeps other consumes of this capsule off.
        const outcome = await sendAttempt(deps.flow, first.provider, first.attempt);
        if (outcome.kind !== 'succeeded') {
          await ledger.locked(org, now, (tx) =>
            endAttempt(tx.db, org, first.attempt, first.previous, outcome, first.f, tx.now),
          );
          throw outcome.error;
        }
        // A failure from here on leaves the attempt pending: a later consume re-sends the same key.
        consumed = await ledger.locked(org, now, async (tx) => {
          const row = (await createGatewayRepository(tx.db).capsule(org, p.capsule_id))!;
          const workflow =
            p.workflow_id === undefined
              ? null
              : ((await createWorkflowRepository(tx.db).get(org, p.entity_id, p.workflow_id)) ?? null);
          const route: Route = { kind: 'provider', provider: first.provider };
          return spend(tx, row, first.latest, first.f, route, workflow, first.attempt, outcome.reference);
        });
      }
      try {
        const receiptId = await writeReceipt(consumed.row, p, consumed.consumption, consumed.pack, false);
        return capsuleAnswer({ ...consumed.row, receipt_id: receiptId, receipt_claimed_at: null });
      } catch (err) {
        // The spend is committed; the receipt is owed, and the next read or sweep writes it.
        await repo.releaseReceipt(org, p.capsule_id, consumed.consumption.consumed_at).catch(() => {});
        deps.log.error(
          { err, capsuleId: p.capsule_id },
          'capsule consumed but its receipt could not be written; it will be repaired',
        );
        throw gatewayError.unavailable(
          'the capsule is consumed and its spend recorded, but its receipt could not be written yet; GET the capsule to see it once repaired',
        );
      }
    },

    /**
     * Writes the receipts consumed capsules still owe (their consume's receipt write failed, or its
     * process died), oldest first; runs at startup and then periodically. `stop` ends the pass after
     * the receipt it is writing. Answers how many it wrote.
     */
    async repairReceipts(options: { limit?: number; stop?: () => boolean } = {}): Promise<number> {
      let repaired = 0;
      for (const row of await repo.owingReceipts(options.limit ?? 100)) {
        if (options.stop?.()) break;
        if ((await repairReceipt(row)).receipt_id !== null) repaired++;
      }
      return repaired;
    },
  };
}

export type PaymentService = ReturnType<typeof createPaymentService>;

/** The kid a capsule's header names, or undefined when it names none that can be read. */
function capsuleKid(jws: string): string | undefined {
  try {
    const header: unknown = JSON.parse(new TextDecoder().decode(fromBase64url(jws.split('.')[0] ?? '')));
    const kid = (header as { kid?: unknown } | null)?.kid;
    return typeof kid === 'string' ? kid : undefined;
  } catch {
    return undefined;
  }
}
