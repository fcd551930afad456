/**
 * Spend budgets: pure arithmetic on integer micro-dollars (1 USD = 1,000,000 micros). Amounts are
 * never binary fractions: a dollar amount is converted from the shortest decimal form of the number
 * the caller sent, and refused if it has more than six decimals, so what is stored is what was meant.
 */

export const MICROS_PER_USD = 1_000_000;
/** Largest amount accepted: one billion dollars (10^15 micros, well inside 2^53). */
export const MAX_USD = 1_000_000_000;
const MAX_MICROS = MAX_USD * MICROS_PER_USD;

export type BudgetScope = 'session' | 'agent' | 'category';
export const BUDGET_SCOPES: readonly BudgetScope[] = ['session', 'agent', 'category'];

/** Window of agent and category budgets; a session budget lasts the session. UTC calendar periods. */
export type BudgetWindow = 'day' | 'month' | 'lifetime';
export const BUDGET_WINDOWS: readonly BudgetWindow[] = ['day', 'month', 'lifetime'];

export interface CategoryPolicy {
  /** Null: the category has no limit of its own. */
  limitMicros: number | null;
  /** Null: no approval threshold of its own. */
  approvalThresholdMicros: number | null;
}

/** Economic configuration in micros; null limits and thresholds are absent (no limit, no threshold). */
export interface EconomicConfig {
  defaultPayer: string | null;
  approvedPayers: string[];
  perActionApprovalThresholdMicros: number | null;
  sessionLimitMicros: number | null;
  agentLimitMicros: number | null;
  categoryPolicies: Record<string, CategoryPolicy>;
  approvalWindowSeconds: number;
  agentWindow: BudgetWindow;
  categoryWindow: BudgetWindow;
}

/**
 * Exact micros of a dollar amount, or null when it is negative, not finite, above MAX_USD or has
 * more than six decimals. Works on the shortest round-trip decimal form (String(n)), the same digits
 * the caller wrote in JSON: 0.1 is 100000 micros, 0.30000000000000004 is refused.
 */
export function toMicros(usd: number): number | null {
  if (typeof usd !== 'number' || !Number.isFinite(usd) || usd < 0 || usd > MAX_USD) return null;
  const m = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(usd));
  if (!m) return null;
  let digits = m[1]! + (m[2] ?? '');
  let point = m[1]!.length + Number(m[3] ?? 0);
  if (point < 0) {
    digits = '0'.repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits += '0'.repeat(point - digits.length);
  const whole = digits.slice(0, point) || '0';
  const fraction = digits.slice(point).replace(/0+$/, '');
  if (fraction.length > 6) return null;
  const micros = Number(whole) * MICROS_PER_USD + Number(fraction.padEnd(6, '0'));
  return Number.isSafeInteger(micros) && micros <= MAX_MICROS ? micros : null;
}

/** Dollars of a micros amount: the double nearest the exact decimal, as JSON prints it. */
export function toUsd(micros: number): number {
  return micros / MICROS_PER_USD;
}

/** "$12.50" style text for messages; exact, trailing zeros beyond cents dropped. */
export function formatUsd(micros: number): string {
  const sign = micros < 0 ? '-' : '';
  const abs = Math.abs(micros);
  const whole = Math.floor(abs / MICROS_PER_USD);
  let frac = String(abs % MICROS_PER_USD).padStart(6, '0');
  while (frac.length > 2 && frac.endsWith('0')) frac = frac.slice(0, -1);
  return `${sign}$${whole}.${frac}`;
}

/**
 * Start of the window an amount at `at` (ISO 8601 UTC) counts in: '' for lifetime, the UTC date for
 * day, the UTC year-month for month. Spend counts in the window of its authorization.
 */
export function windowStart(window: BudgetWindow, at: string): string {
  if (window === 'day') return at.slice(0, 10);
  if (window === 'month') return at.slice(0, 7);
  return '';
}

/**
 * A category's own policy, or null. Own properties only: a category called `constructor` or
 * `toString` must not read what a plain object inherits.
 */
function categoryPolicy(policies: Record<string, CategoryPolicy>, category: string): CategoryPolicy | null {
  return Object.hasOwn(policies, category) ? (policies[category] ?? null) : null;
}

const minOf = (a: number | null, b: number | null): number | null =>
  a === null ? b : b === null ? a : Math.min(a, b);

/**
 * A project's configuration can only tighten its organization's: limits, thresholds and the
 * reservation window take the smaller value, approved payers the intersection, categories the
 * union (each field the smaller). The default payer is the project's, else the organization's.
 * Windows are the organization's (both configurations count in the same windows).
 *
 * Without the organization's configuration nothing applies (null: spend is not authorized),
 * whatever the project's says: a project's configuration is written with the project's own keys,
 * so on its own it would let a key switch spending on that no person configured. It applies once
 * the organization is configured.
 */
export function combineConfigs(
  org: EconomicConfig | null,
  project: EconomicConfig | null,
): EconomicConfig | null {
  if (!org) return null;
  if (!project) return org;
  const categories: Record<string, CategoryPolicy> = { ...org.categoryPolicies };
  for (const [name, p] of Object.entries(project.categoryPolicies)) {
    const o = categoryPolicy(categories, name);
    categories[name] = o
      ? {
          limitMicros: minOf(o.limitMicros, p.limitMicros),
          approvalThresholdMicros: minOf(o.approvalThresholdMicros, p.approvalThresholdMicros),
        }
      : p;
  }
  return {
    defaultPayer: project.defaultPayer ?? org.defaultPayer,
    approvedPayers: project.approvedPayers.filter((p) => org.approvedPayers.includes(p)),
    perActionApprovalThresholdMicros: minOf(
      org.perActionApprovalThresholdMicros,
      project.perActionApprovalThresholdMicros,
    ),
    sessionLimitMicros: minOf(org.sessionLimitMicros, project.sessionLimitMicros),
    agentLimitMicros: minOf(org.agentLimitMicros, project.agentLimitMicros),
    categoryPolicies: categories,
    approvalWindowSeconds: Math.min(org.approvalWindowSeconds, project.approvalWindowSeconds),
    agentWindow: org.agentWindow,
    categoryWindow: org.categoryWindow,
  };
}

/** What a scope has used so far in its current window. */
export interface ScopeUsage {
  spentMicros: number;
  reservedMicros: number;
}

export interface ScopeFigures extends ScopeUsage {
  /** Null: the scope has no limit (for example a category without a policy). */
  limitMicros: number | null;
  /** limit - spent - reserved, never below zero; null without a limit. */
  remainingMicros: number | null;
}

export function limitOf(config: EconomicConfig, scope: BudgetScope, category: string): number | null {
  if (scope === 'session') return config.sessionLimitMicros;
  if (scope === 'agent') return config.agentLimitMicros;
  return categoryPolicy(config.categoryPolicies, category)?.limitMicros ?? null;
}

export function figuresOf(limitMicros: number | null, usage: ScopeUsage): ScopeFigures {
  return {
    limitMicros,
    spentMicros: usage.spentMicros,
    reservedMicros: usage.reservedMicros,
    remainingMicros:
      limitMicros === null ? null : Math.max(0, limitMicros - usage.spentMicros - usage.reservedMicros),
  };
}

/** Every reasonCode an authorization answer can carry (a commit answers `economic_committed`). */
export const AUTHORIZATION_REASON_CODES = [
  'economic_authorized',
  'approval_granted',
  'approval_required',
  'economic_disabled',
  'quote_exceeds_max_acceptable',
  'payer_not_approved',
  'session_budget_exceeded',
  'agent_budget_exceeded',
  'category_budget_exceeded',
  'approvals_unavailable',
  'approval_denied',
  'approval_invalid',
] as const;
export type AuthorizationReasonCode = (typeof AUTHORIZATION_REASON_CODES)[number];

export interface AuthorizationInput {
  config: EconomicConfig | null;
  quoteMicros: number;
  maxAcceptableMicros: number;
  /** Resolved payer (request, else the default payer); null when neither names one. */
  payer: string | null;
  category: string;
  /** Usage of each scope, reservations still counting. */
  usage: Partial<Record<BudgetScope, ScopeUsage>>;
  /** The organization's plan has human approvals. */
  approvalsAvailable: boolean;
  /** A person approved exactly this action (its approval is presented and usable). */
  approved: boolean;
}

export interface AuthorizationOutcome {
  decision: 'allow' | 'deny' | 'require_approval';
  reasonCode: AuthorizationReasonCode;
  message: string;
}

const deny = (reasonCode: AuthorizationReasonCode, message: string): AuthorizationOutcome => ({
  decision: 'deny',
  reasonCode,
  message,
});

/**
 * The decision on a quote, in a fixed order: configured, within the caller's own maximum, an
 * approved payer, every budget with a limit (limit - spent - reserved, reservations still counting),
 * then the approval thresholds (at or above: approval). A budget that does not fit denies before
 * any person is asked: an approval never raises a budget. Every configured limit is checked, whatever
 * scopes the caller asked to see: a caller cannot leave out a limit a person set.
 */
export function decideAuthorization(input: AuthorizationInput): AuthorizationOutcome {
  const { config, quoteMicros: quote, category } = input;
  if (!config) {
    return deny('economic_disabled', 'No economic configuration is set; spend is not authorized');
  }
  if (quote > input.maxAcceptableMicros) {
    return deny(
      'quote_exceeds_max_acceptable',
      `Quote ${formatUsd(quote)} exceeds the maximum acceptable ${formatUsd(input.maxAcceptableMicros)}`,
    );
  }
  if (input.payer === null) return deny('payer_not_approved', 'No payer given and no default payer set');
  if (!config.approvedPayers.includes(input.payer)) {
    return deny('payer_not_approved', `Payer "${input.payer}" is not an approved payer`);
  }
  for (const scope of BUDGET_SCOPES) {
    const limit = limitOf(config, scope, category);
    if (limit === null) continue;
    const usage = input.usage[scope] ?? { spentMicros: 0, reservedMicros: 0 };
    const left = limit - usage.spentMicros - usage.reservedMicros;
    if (quote > left) {
      const what = scope === 'category' ? `category "${category}"` : scope;
      return deny(
        `${scope}_budget_exceeded`,
        `Quote ${formatUsd(quote)} exceeds the remaining ${what} budget of ${formatUsd(Math.max(0, left))} (limit ${formatUsd(limit)}, spent ${formatUsd(usage.spentMicros)}, reserved ${formatUsd(usage.reservedMicros)})`,
      );
    }
  }
  const thresholds: string[] = [];
  const perAction = config.perActionApprovalThresholdMicros;
  if (perAction !== null && quote >= perAction) {
    thresholds.push(`the per-action approval threshold of ${formatUsd(perAction)}`);
  }
  const byCategory = categoryPolicy(config.categoryPolicies, category)?.approvalThresholdMicros ?? null;
  if (byCategory !== null && quote >= byCategory) {
    thresholds.push(`the approval threshold of category "${category}" (${formatUsd(byCategory)})`);
  }
  if (thresholds.length > 0) {
    const why = `Quote ${formatUsd(quote)} is at or above ${thresholds.join(' and ')}`;
    if (input.approved) {
      return { decision: 'allow', reasonCode: 'approval_granted', message: `${why}; approved by a person` };
    }
    if (!input.approvalsAvailable) {
      return deny(
        'approvals_unavailable',
        `${why}: human approval is required, but human-in-the-loop approvals need the Team plan or above`,
      );
    }
    return {
      decision: 'require_approval',
      reasonCode: 'approval_required',
      message: `${why}: a person must approve`,
    };
  }
  return {
    decision: 'allow',
    reasonCode: 'economic_authorized',
    message: `Authorized ${formatUsd(quote)} within every budget`,
  };
}
