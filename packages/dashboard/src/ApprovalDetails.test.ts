import { describe, expect, it } from 'vitest';
import { boundAction, dualControl } from './ApprovalDetails.js';
import type { PendingApproval } from './api.js';

const base: PendingApproval = {
  id: 'a1',
  toolName: 'wire',
  arguments: {},
  expiresAt: '2030-01-01T00:00:00.000Z',
  createdAt: '2030-01-01T00:00:00.000Z',
};

describe('dual control on an approval card', () => {
  it('says nothing for a single approval, whether the fields are absent or say 1', () => {
    expect(dualControl(base, 'alice')).toBeNull();
    expect(dualControl({ ...base, requiredApprovals: 1, approvers: [] }, 'alice')).toBeNull();
  });

  it('names who approved and how many approvals are still needed', () => {
    const one = { resolvedBy: 'bob', resolvedAt: '2030-01-01T00:01:00.000Z' };
    expect(dualControl({ ...base, requiredApprovals: 2, approvers: [one] }, 'alice')).toBe(
      'approved by bob; 1 more approval needed',
    );
    expect(dualControl({ ...base, requiredApprovals: 3, approvers: [one] }, 'bob')).toBe(
      'approved by bob (you); 2 more approvals needed',
    );
    expect(dualControl({ ...base, requiredApprovals: 2 }, 'alice')).toBe(
      'Needs 2 approvals from different people',
    );
  });
});

describe('the action an approval is bound to', () => {
  it('shows amount, payee, rail and invoice of a capsule mint', () => {
    const capsule = {
      ...base,
      toolName: 'gateway.capsule',
      arguments: {
        entity_id: 'acme',
        payee: { name: 'big vendor', iban: 'DE89370400440532013000' },
        rail_allowlist: ['ach', 'wire'],
        amount_ceiling: { currency: 'USD', amount: '250.00' },
        invoice_hash: null,
      },
    };
    expect(boundAction(capsule)).toEqual([
      ['Amount', '250.00 USD'],
      ['Payee', 'big vendor, account …3000'],
      ['Rail', 'ach, wire'],
      ['Invoice', 'none'],
      ['Entity', 'acme'],
    ]);
  });

  it('shows action id, amount and category of a spend authorization, and nothing for a tool call', () => {
    const spend: PendingApproval = {
      ...base,
      toolName: 'book_flight',
      arguments: { actionId: 'act-2', estimatedSpendUsd: 1234.5, category: 'travel', payer: null },
      escalation: { source: 'economic', policy: 'spend budgets', constraint: 'threshold' },
    };
    expect(boundAction(spend)).toEqual([
      ['Action', 'act-2'],
      ['Amount', '$1,234.50'],
      ['Category', 'travel'],
      ['Payer', '—'],
      ['Tool', 'book_flight'],
    ]);
    expect(boundAction({ ...base, arguments: { amount: 5 } })).toBeNull();
  });
});
