import type {
  AuthorizationReasonCode,
  BudgetScope,
  BudgetWindow,
  EconomicConfig,
  ScopeFigures,
} from '@svc/policy-engine';
import { toUsd } from '@svc/policy-engine';

/**
 * Which configuration governs an answer: only the organization's, both combined (a project can only
 * tighten its organization), or none (economic authorization is disabled). A project's configuration
 * never governs alone: it applies only with the organization's.
 */
export type Authority = 'organization' | 'organization+project' | 'none';

/** An authorize request after validation, amounts in micros. What idempotency compares. */
export interface ActionRequest {
  actionId: string;
  sessionId: string;
  agentId: string;
  toolName: string;
  category: string;
  /** As requested; null means the default payer. */
  payer: string | null;
  quoteMicros: number;
  maxAcceptableMicros: number;
  budgetScopes: BudgetScope[];
  metadata: Record<string, unknown>;
}

export interface AuthorizeInput extends ActionRequest {
  mode: 'live' | 'simulation';
  /** The approval of this action, presented once a person approved it. */
  approvalId: string | null;
}

export interface CommitInput {
  actionId: string;
  sessionId: string;
  agentId: string;
  toolName: string;
  category: string;
  payer: string | null;
  quoteMicros: number;
  actualMicros: number;
  approvalId: string | null;
}

export interface ScopeBudget {
  limitUsd: number | null;
  spentUsd: number;
  reservedUsd: number;
  remainingUsd: number | null;
}

export interface Budget {
  currency: 'USD';
  asOf: string;
  /** Where the figures come from: always the organization's spend ledger. */
  source: 'ledger';
  session?: ScopeBudget;
  agent?: ScopeBudget;
  category?: ScopeBudget;
}

export interface AuthorizationAnswer {
  actionId: string;
  decision: 'allow' | 'deny' | 'require_approval';
  reasonCode: AuthorizationReasonCode;
  message: string;
  authority: Authority;
  payer: string | null;
  quotedSpendUsd: number;
  budget: Budget;
  approvalId?: string;
  /** Live allow: when the reservation stops counting unless committed. */
  reservationExpiresAt?: string;
  provisional?: true;
}

export interface CommitAnswer {
  actionId: string;
  status: 'committed';
  authority: Authority;
  category: string;
  payer: string | null;
  quotedSpendUsd: number;
  actualSpendUsd: number;
  /** actual - quote when the actual exceeds the quote, else 0. */
  overrunUsd: number;
  approvalId: string | null;
  reasonCode: 'economic_committed';
  message: string;
  budget: Budget;
}

export interface StatusAnswer {
  enabled: boolean;
  authority: Authority;
  healthy: boolean;
  pendingApprovals: string[];
  budget: Budget | null;
}

/** States of an action id (spend_actions.state). */
export type ActionState = 'denied' | 'pending_approval' | 'reserved' | 'committed' | 'expired';

/** Ledger entry kinds; a payment gateway posting to the same ledger adds its own kinds. */
export type EntryKind = 'authorization' | 'reservation' | 'commit' | 'release' | 'expiry';

export interface CategoryPolicyView {
  limitUsd: number | null;
  approvalThresholdUsd: number | null;
}

/** The configuration as the API shows it (dollars). */
export interface EconomicConfigView {
  defaultPayer: string | null;
  approvedPayers: string[];
  perActionApprovalThresholdUsd: number | null;
  sessionLimitUsd: number | null;
  agentLimitUsd: number | null;
  categoryPolicies: Record<string, CategoryPolicyView>;
  approvalWindowSeconds: number;
  agentWindow: BudgetWindow;
  categoryWindow: BudgetWindow;
}

export interface ConfigAnswer {
  scope: 'organization' | 'project';
  projectId: string | null;
  /** The configuration stored at this scope, null if none. */
  config: EconomicConfigView | null;
  updatedAt: string | null;
  /** What authorizations of this caller are decided under (the two levels combined). */
  effective: EconomicConfigView | null;
  authority: Authority;
}

const usdOrNull = (m: number | null) => (m === null ? null : toUsd(m));

export function toConfigView(c: EconomicConfig): EconomicConfigView {
  return {
    defaultPayer: c.defaultPayer,
    approvedPayers: c.approvedPayers,
    perActionApprovalThresholdUsd: usdOrNull(c.perActionApprovalThresholdMicros),
    sessionLimitUsd: usdOrNull(c.sessionLimitMicros),
    agentLimitUsd: usdOrNull(c.agentLimitMicros),
    categoryPolicies: Object.fromEntries(
      Object.entries(c.categoryPolicies).map(([k, p]) => [
        k,
        { limitUsd: usdOrNull(p.limitMicros), approvalThresholdUsd: usdOrNull(p.approvalThresholdMicros) },
      ]),
    ),
    approvalWindowSeconds: c.approvalWindowSeconds,
    agentWindow: c.agentWindow,
    categoryWindow: c.categoryWindow,
  };
}

export function toScopeBudget(f: ScopeFigures): ScopeBudget {
  return {
    limitUsd: usdOrNull(f.limitMicros),
    spentUsd: toUsd(f.spentMicros),
    reservedUsd: toUsd(f.reservedMicros),
    remainingUsd: usdOrNull(f.remainingMicros),
  };
}

/** What an approval of an economic action shows a person, and what its argument hash binds. */
export function approvalArguments(r: ActionRequest, payer: string | null): Record<string, unknown> {
  return {
    actionId: r.actionId,
    sessionId: r.sessionId,
    agentId: r.agentId,
    category: r.category,
    payer,
    estimatedSpendUsd: toUsd(r.quoteMicros),
    maxAcceptableSpendUsd: toUsd(r.maxAcceptableMicros),
    budgetScopes: r.budgetScopes,
    metadata: r.metadata,
  };
}
