import { describe, expect, it } from 'vitest';
import type { Receipt, WriteItem } from './model.js';
import { rowsFor } from './rows.js';

const receipt = (i: number) =>
  ({
    organization_id: 'org',
    sequence: i,
    receipt_id: `r${i}`,
    decision_id: null,
    receipt_hash: `h${i}`,
    previous_receipt_hash: `p${i}`,
    merkle_root: `m${i}`,
    timestamp: '2026-01-01T00:00:00.000Z',
  }) as unknown as Receipt;

const item = (sessionId: string, calls: number): WriteItem => ({
  receipt: {} as WriteItem['receipt'],
  session: {
    organization_id: 'org',
    session_id: sessionId,
    tool_name: 'pay',
    calls,
    cumulative: JSON.stringify({ amount: calls * 10 }),
    updated_at: '2026-01-01T00:00:00.000Z',
  },
});

describe('rowsFor', () => {
  it('keeps the session row with the most calls per counter, whatever the item order', () => {
    const items = [item('a', 2), item('a', 3), item('b', 1), item('a', 1)];
    const rows = rowsFor(
      items,
      items.map((_, i) => receipt(i)),
    );
    expect(rows.sessions.map((s) => [s.session_id, s.calls, s.cumulative])).toEqual([
      ['a', 3, '{"amount":30}'],
      ['b', 1, '{"amount":10}'],
    ]);
    expect(rows.receipts).toHaveLength(4);
  });
});
