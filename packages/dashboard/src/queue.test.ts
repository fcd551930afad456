import { describe, expect, it } from 'vitest';
import type { PendingApproval } from './api.js';
import {
  BATCH_SIZE,
  batchOutcome,
  inBatches,
  queueChange,
  selectLabel,
  summaryOf,
  timeLeft,
} from './queue.js';

const approval = (id: string, toolName = 'wire', args: Record<string, unknown> = {}): PendingApproval => ({
  id,
  toolName,
  arguments: args,
  expiresAt: '2030-01-01T00:10:00.000Z',
  createdAt: '2030-01-01T00:00:00.000Z',
});

describe('the time left to decide', () => {
  const at = Date.parse('2030-01-01T00:00:00.000Z');
  it('counts down, then says expired (never "expired left")', () => {
    expect(timeLeft('2030-01-01T01:02:00.000Z', at)).toEqual({ expired: false, text: '1 h 2 min left' });
    expect(timeLeft('2030-01-01T00:03:20.000Z', at)).toEqual({ expired: false, text: '3 min 20 s left' });
    expect(timeLeft('2030-01-01T00:00:09.000Z', at)).toEqual({ expired: false, text: '9 s left' });
    expect(timeLeft('2030-01-01T00:00:00.000Z', at)).toEqual({ expired: true, text: 'Expired' });
    expect(timeLeft('2029-12-31T23:00:00.000Z', at)).toEqual({ expired: true, text: 'Expired' });
  });
});

describe('resolving a large selection', () => {
  it('sends at most 100 ids per request', () => {
    const ids = Array.from({ length: 250 }, (_, i) => `id-${i}`);
    const batches = inBatches(ids);
    expect(BATCH_SIZE).toBe(100);
    expect(batches.map((b) => b.length)).toEqual([100, 100, 50]);
    expect(batches.flat()).toEqual(ids);
    expect(inBatches([])).toEqual([]);
  });

  it('says nothing when all went through, else how many did and why the others did not', () => {
    expect(batchOutcome('deny', 120, [])).toBeNull();
    expect(
      batchOutcome('approve', 120, [...Array(19).fill('Approval already resolved'), 'Approval expired']),
    ).toBe(
      '100 of 120 approved; 20 not resolved: Approval already resolved (19 approvals); Approval expired',
    );
  });
});

describe('telling approvals apart and announcing changes', () => {
  it('names each checkbox by tool, what it is about and its id', () => {
    const a = approval('0f1e2d3c-aaaa-bbbb-cccc-111122223333', 'wire', {
      amount: 50,
      to: 'acct-7',
      memo: 'rent',
    });
    expect(summaryOf(a)).toBe('amount 50, to acct-7, memo rent');
    expect(selectLabel(a)).toBe('Select wire: amount 50, to acct-7, memo rent (0f1e2d3c)');
    // Hidden characters stay visible in the name too.
    expect(selectLabel(approval('abcdef012345', 'wire\u200B', { to: '\u202Eabc' }))).toBe(
      'Select wire\\u200B: to \\u202Eabc (abcdef01)',
    );
    expect(summaryOf(approval('x'))).toBe('no arguments');
    const spend: PendingApproval = {
      ...approval('s1', 'book_flight', { actionId: 'act-2', estimatedSpendUsd: 75, category: 'travel' }),
      escalation: { source: 'economic', policy: 'spend budgets', constraint: 'threshold' },
    };
    expect(summaryOf(spend)).toBe('Action act-2, Amount $75');
  });

  it('announces approvals arriving and leaving, not the first read nor a read without change', () => {
    expect(queueChange(null, [approval('a')])).toBeNull();
    expect(queueChange(['a'], [approval('a')])).toBeNull();
    expect(queueChange(['a'], [approval('a'), approval('b', 'pay'), approval('c', 'pay')])).toBe(
      '2 new approvals waiting: pay. 3 waiting in all.',
    );
    expect(queueChange(['a', 'b'], [approval('c', 'wire')])).toBe(
      '1 new approval waiting: wire. 2 approvals no longer waiting. 1 waiting in all.',
    );
    expect(queueChange(['a'], [])).toBe('1 approval no longer waiting. 0 waiting in all.');
  });
});
