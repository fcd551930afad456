import type { OrgBatch, Receipt, ReceiptInput, WriteItem } from './model.js';
import { RECEIPT_INPUT_KEYS, receiptOf } from './receipt.js';

/**
 * Batches on their way to the writer thread and its receipts on the way back. Each item goes as
 * arrays of its values in a fixed column order, which the thread binds to its statements by
 * position, without building row objects; the thread answers only what the chain gave each
 * receipt (four values, not the whole receipt). The thread's CPU per decision fell by about a fifth
 * with this (docs/benchmarks.md, "The writer thread: arrays in, four values out").
 */

/** The decision row's columns a write item carries (the receipt's four are added by the store). */
export const DECISION_INPUT_COLUMNS = [
  'id',
  'organization_id',
  'project_id',
  'tool_name',
  'arguments',
  'context',
  'decision',
  'mode',
  'reason',
  'failed_argument',
  'matched_exception',
  'validations',
  'latency_ms',
  'source',
  'policy_version',
  'created_at',
] as const satisfies readonly (keyof NonNullable<WriteItem['decision']>)[];

// Every column of the decision row a write item carries is listed (a new one must be added here).
type Unlisted<T, L> = Exclude<keyof NonNullable<T>, L>;
const _everyDecisionColumn: [
  Unlisted<WriteItem['decision'], (typeof DECISION_INPUT_COLUMNS)[number]>,
] extends [never]
  ? true
  : never = true;

export const SESSION_COLUMNS = [
  'organization_id',
  'session_id',
  'tool_name',
  'calls',
  'cumulative',
  'updated_at',
] as const satisfies readonly (keyof NonNullable<WriteItem['session']>)[];

const _everySessionColumn: [Unlisted<WriteItem['session'], (typeof SESSION_COLUMNS)[number]>] extends [never]
  ? true
  : never = true;

/**
 * One write item: its receipt id, its receipt fields in RECEIPT_INPUT_KEYS order (undefined where
 * absent), then its decision row in DECISION_INPUT_COLUMNS order and its session row in
 * SESSION_COLUMNS order (absent columns null), or null for no such row.
 */
export type WireItem = [
  receiptId: string,
  receipt: unknown[],
  decision: unknown[] | null,
  session: unknown[] | null,
];

export interface WireBatch {
  organizationId: string;
  items: WireItem[];
}

/** What the chain gave one receipt; the rest of it is in the values the sender sent. */
export type WireReceipt = [
  sequence: number,
  previousReceiptHash: string,
  merkleRoot: string,
  receiptHash: string,
];

const valuesOf = (row: Record<string, unknown>, columns: readonly string[]): unknown[] =>
  columns.map((c) => row[c] ?? null);

export function encodeBatches(batches: readonly OrgBatch[]): WireBatch[] {
  return batches.map((b) => ({
    organizationId: b.organizationId,
    items: b.items.map(({ item, receiptId }): WireItem => {
      const receipt = item.receipt as unknown as Record<string, unknown>;
      return [
        receiptId,
        RECEIPT_INPUT_KEYS.map((k) => receipt[k]),
        item.decision ? valuesOf(item.decision, DECISION_INPUT_COLUMNS) : null,
        item.session ? valuesOf(item.session, SESSION_COLUMNS) : null,
      ];
    }),
  }));
}

/** The receipt input of a wire item: the same fields the item's receipt had, and its receipt id. */
export function receiptInputOf(item: WireItem): ReceiptInput {
  const values = item[1];
  const input: Record<string, unknown> = { receipt_id: item[0] };
  for (let i = 0; i < RECEIPT_INPUT_KEYS.length; i++) {
    if (values[i] !== undefined) input[RECEIPT_INPUT_KEYS[i]!] = values[i];
  }
  return input as unknown as ReceiptInput;
}

/** The receipts of a commit, in the order of its batches and their items. */
export function encodeReceipts(receipts: Iterable<Receipt>): WireReceipt[] {
  const out: WireReceipt[] = [];
  for (const r of receipts) out.push([r.sequence, r.previous_receipt_hash, r.merkle_root, r.receipt_hash]);
  return out;
}

/**
 * The receipts of `batches` from what the commit of them sent back (encodeReceipts), keyed by
 * receipt id: each rebuilt from the same values the committer hashed, not from the items they were
 * encoded from, which their callers could still change.
 */
export function decodeReceipts(
  batches: readonly WireBatch[],
  wire: readonly WireReceipt[],
): Map<string, Receipt> {
  const out = new Map<string, Receipt>();
  let i = 0;
  for (const b of batches) {
    for (const item of b.items) {
      const w = wire[i++];
      if (!w) throw new Error('the writer thread answered fewer receipts than the batch has');
      out.set(item[0], receiptOf(receiptInputOf(item), item[0], w[0], w[1], w[2], w[3]));
    }
  }
  if (i !== wire.length) throw new Error('the writer thread answered more receipts than the batch has');
  return out;
}
