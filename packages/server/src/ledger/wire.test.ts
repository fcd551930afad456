import { deserialize, serialize } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { decisionItem } from '../../test/ledger.js';
import type { OrgBatch } from './model.js';
import { appendReceipts, emptyChainHead } from './receipt.js';
import { decodeReceipts, encodeBatches, encodeReceipts, receiptInputOf } from './wire.js';

const batch = (): OrgBatch[] => {
  const at = '2026-01-01T00:00:00.000Z';
  const base = decisionItem({ organizationId: 'org', toolName: 'pay', decision: 'allow', reason: 'ok', at });
  return [
    {
      organizationId: 'org',
      items: [
        { item: base, receiptId: 'r1' },
        {
          item: { receipt: { ...base.receipt, client_id: 'c', judge_model: 'm', approval_id: undefined } },
          receiptId: 'r2',
        },
      ],
    },
  ];
};

describe('the writer thread wire format', () => {
  it('carries each receipt input unchanged through a structured clone, and no row where the item has none', () => {
    const batches = batch();
    const wire = deserialize(serialize(encodeBatches(batches))) as ReturnType<typeof encodeBatches>;
    const inputs = wire[0]!.items.map(receiptInputOf);
    expect(inputs[0]).toEqual({ ...batches[0]!.items[0]!.item.receipt, receipt_id: 'r1' });
    expect(inputs[1]).toStrictEqual({
      ...batches[0]!.items[0]!.item.receipt,
      client_id: 'c',
      judge_model: 'm',
      receipt_id: 'r2',
    });
    // The second item records no decision row and moves no session counter.
    expect(wire[0]!.items[1]![2]).toBeNull();
    expect(wire[0]!.items[1]![3]).toBeNull();
  });

  it('rebuilds the receipts a commit made from the four values it sends back', () => {
    const batches = batch();
    const { receipts } = appendReceipts(
      emptyChainHead(),
      batches[0]!.items.map(({ item, receiptId }) => ({ ...item.receipt, receipt_id: receiptId })),
    );
    const wire = encodeBatches(batches);
    // What the receipts are rebuilt from was copied at encoding: a later change to an item is not in them.
    (batches[0]!.items[0]!.item.receipt as { reason: string }).reason = 'changed afterwards';
    const decoded = decodeReceipts(wire, encodeReceipts(receipts));
    expect([...decoded.values()]).toStrictEqual(receipts);
    expect(JSON.stringify([...decoded.values()])).toBe(JSON.stringify(receipts));
    expect(() => decodeReceipts(wire, encodeReceipts(receipts.slice(1)))).toThrow(/fewer receipts/);
    expect(() => decodeReceipts(wire, encodeReceipts([...receipts, receipts[0]!]))).toThrow(/more receipts/);
  });
});
