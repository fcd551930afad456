import { describe, expect, it } from 'vitest';
import {
  combineConfigs,
  decideAuthorization,
  type EconomicConfig,
  figuresOf,
  formatUsd,
  toMicros,
  toUsd,
  windowStart,
} from './budget.js';

const config = (over: Partial<EconomicConfig> = {}): EconomicConfig => ({
  defaultPayer: 'corp',
  approvedPayers: ['corp'],
  perActionApprovalThresholdMicros: 50_000_000,
  sessionLimitMicros: 100_000_000,
  agentLimitMicros: 500_000_000,
  categoryPolicies: { travel: { limitMicros: 200_000_000, approvalThresholdMicros: 30_000_000 } },
  approvalWindowSeconds: 3600,
  agentWindow: 'day',
  categoryWindow: 'day',
  ...over,
});

const base = {
  config: config(),
  quoteMicros: 10_000_000,
  maxAcceptableMicros: 10_000_000,
  payer: 'corp',
  category: 'food',
  usage: {},
  approvalsAvailable: true,
  approved: false,
};

describe('toMicros', () => {
  it('converts the decimal the caller wrote, exactly', () => {
    expect(toMicros(0)).toBe(0);
    expect(toMicros(0.1)).toBe(100_000);
    expect(toMicros(10)).toBe(10_000_000);
    expect(toMicros(12.345678)).toBe(12_345_678);
    expect(toMicros(0.000001)).toBe(1);
    expect(toMicros(1e-6)).toBe(1);
    expect(toMicros(1_000_000_000)).toBe(1e15);
  });
  it('refuses what cannot be held exactly or is out of bounds', () => {
    expect(toMicros(0.1 + 0.2)).toBeNull();
    expect(toMicros(1e-7)).toBeNull();
    expect(toMicros(1.0000001)).toBeNull();
    expect(toMicros(-1)).toBeNull();
    expect(toMicros(Number.NaN)).toBeNull();
    expect(toMicros(Number.POSITIVE_INFINITY)).toBeNull();
    expect(toMicros(1_000_000_000.000001)).toBeNull();
    expect(toMicros(1e21)).toBeNull();
  });
  it('round-trips through toUsd', () => {
    for (const v of [0, 0.1, 0.01, 9.99, 123.456789, 1_000_000_000]) expect(toUsd(toMicros(v)!)).toBe(v);
  });
});

describe('formatUsd and windows', () => {
  it('prints cents, and micros only where present', () => {
    expect(formatUsd(10_000_000)).toBe('$10.00');
    expect(formatUsd(10_500_000)).toBe('$10.50');
    expect(formatUsd(1)).toBe('$0.000001');
    expect(formatUsd(-2_000_000)).toBe('-$2.00');
  });
  it('starts day, month and lifetime windows at UTC boundaries', () => {
    expect(windowStart('day', '2026-11-22T23:59:59.999Z')).toBe('2026-11-22');
    expect(windowStart('month', '2026-11-22T23:59:59.999Z')).toBe('2026-11');
    expect(windowStart('lifetime', '2026-11-22T23:59:59.999Z')).toBe('');
  });
});

describe('decideAuthorization', () => {
  it('allows a quote within every budget', () => {
    expect(decideAuthorization(base)).toMatchObject({ decision: 'allow', reasonCode: 'economic_authorized' });
  });
  it('denies without configuration', () => {
    expect(decideAuthorization({ ...base, config: null }).reasonCode).toBe('economic_disabled');
  });
  it('denies a quote above the maximum acceptable', () => {
    expect(decideAuthorization({ ...base, maxAcceptableMicros: 9_999_999 }).reasonCode).toBe(
      'quote_exceeds_max_acceptable',
    );
  });
  it('denies an unapproved or missing payer', () => {
    expect(decideAuthorization({ ...base, payer: 'eve' }).reasonCode).toBe('payer_not_approved');
    expect(decideAuthorization({ ...base, payer: null }).reasonCode).toBe('payer_not_approved');
  });
  it('counts spent and reserved against every scope with a limit, exactly at the edge', () => {
    const usage = { session: { spentMicros: 60_000_000, reservedMicros: 30_000_000 } };
    expect(decideAuthorization({ ...base, usage }).decision).toBe('allow');
    expect(
      decideAuthorization({ ...base, usage, quoteMicros: 10_000_001, maxAcceptableMicros: 2e7 }),
    ).toMatchObject({ decision: 'deny', reasonCode: 'session_budget_exceeded' });
    const agent = { agent: { spentMicros: 495_000_000, reservedMicros: 0 } };
    expect(decideAuthorization({ ...base, usage: agent }).reasonCode).toBe('agent_budget_exceeded');
    const cat = { category: { spentMicros: 195_000_000, reservedMicros: 0 } };
    expect(decideAuthorization({ ...base, usage: cat }).decision).toBe('allow');
    expect(
      decideAuthorization({ ...base, category: 'travel', quoteMicros: 10_000_000, usage: cat }).reasonCode,
    ).toBe('category_budget_exceeded');
  });
  it('asks for approval at or above a threshold, after the budgets', () => {
    const q = { ...base, quoteMicros: 50_000_000, maxAcceptableMicros: 50_000_000 };
    expect(decideAuthorization(q)).toMatchObject({
      decision: 'require_approval',
      reasonCode: 'approval_required',
    });
    expect(decideAuthorization({ ...q, quoteMicros: 49_999_999 }).decision).toBe('allow');
    expect(
      decideAuthorization({ ...base, category: 'travel', quoteMicros: 30_000_000, maxAcceptableMicros: 3e7 })
        .reasonCode,
    ).toBe('approval_required');
    expect(decideAuthorization({ ...q, approved: true })).toMatchObject({
      decision: 'allow',
      reasonCode: 'approval_granted',
    });
    expect(decideAuthorization({ ...q, approvalsAvailable: false }).reasonCode).toBe('approvals_unavailable');
    const full = { session: { spentMicros: 60_000_000, reservedMicros: 0 } };
    expect(decideAuthorization({ ...q, usage: full, approved: true }).reasonCode).toBe(
      'session_budget_exceeded',
    );
  });
  it('treats null limits and thresholds as absent', () => {
    const open = config({
      sessionLimitMicros: null,
      agentLimitMicros: null,
      perActionApprovalThresholdMicros: null,
    });
    expect(
      decideAuthorization({ ...base, config: open, quoteMicros: 1e15, maxAcceptableMicros: 1e15 }).decision,
    ).toBe('allow');
  });
});

describe('combineConfigs and figures', () => {
  it('lets a project only tighten its organization', () => {
    const org = config();
    const project = config({
      defaultPayer: 'team',
      approvedPayers: ['team', 'corp'],
      sessionLimitMicros: 200_000_000,
      agentLimitMicros: 100_000_000,
      perActionApprovalThresholdMicros: null,
      categoryPolicies: {
        travel: { limitMicros: null, approvalThresholdMicros: 10_000_000 },
        ads: { limitMicros: 5, approvalThresholdMicros: null },
      },
      approvalWindowSeconds: 60,
      agentWindow: 'lifetime',
    });
    expect(combineConfigs(org, project)).toEqual({
      defaultPayer: 'team',
      approvedPayers: ['corp'],
      perActionApprovalThresholdMicros: 50_000_000,
      sessionLimitMicros: 100_000_000,
      agentLimitMicros: 100_000_000,
      categoryPolicies: {
        travel: { limitMicros: 200_000_000, approvalThresholdMicros: 10_000_000 },
        ads: { limitMicros: 5, approvalThresholdMicros: null },
      },
      approvalWindowSeconds: 60,
      agentWindow: 'day',
      categoryWindow: 'day',
    });
    expect(combineConfigs(org, null)).toBe(org);
    expect(combineConfigs(null, null)).toBeNull();
  });
  it("applies nothing without the organization's configuration, whatever the project's says", () => {
    const project = config({ approvedPayers: ['me'], defaultPayer: 'me', sessionLimitMicros: null });
    expect(combineConfigs(null, project)).toBeNull();
    expect(
      decideAuthorization({ ...base, config: combineConfigs(null, project), payer: 'me' }),
    ).toMatchObject({ decision: 'deny', reasonCode: 'economic_disabled' });
  });
  it('combines a category named like an Object.prototype member as any other', () => {
    const limited = { limitMicros: 5_000_000, approvalThresholdMicros: 1_000_000 };
    for (const name of ['constructor', 'toString', 'valueOf', 'hasOwnProperty']) {
      const project = config({ categoryPolicies: { [name]: limited } });
      const combined = combineConfigs(config(), project)!;
      expect(combined.categoryPolicies[name]).toEqual(limited);
      const quote = { ...base, config: combined, category: name };
      expect(
        decideAuthorization({ ...quote, quoteMicros: 6_000_000, maxAcceptableMicros: 6e6 }),
      ).toMatchObject({ decision: 'deny', reasonCode: 'category_budget_exceeded' });
      expect(
        decideAuthorization({ ...quote, quoteMicros: 2_000_000, maxAcceptableMicros: 2e6 }),
      ).toMatchObject({ decision: 'require_approval', reasonCode: 'approval_required' });
      // Not configured at all: no category limit, nothing inherited read as one.
      expect(decideAuthorization({ ...base, category: name }).decision).toBe('allow');
    }
  });
  it('never reports a negative remaining amount', () => {
    expect(figuresOf(10, { spentMicros: 12, reservedMicros: 0 }).remainingMicros).toBe(0);
    expect(figuresOf(null, { spentMicros: 12, reservedMicros: 0 }).remainingMicros).toBeNull();
  });
});
