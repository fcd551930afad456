import type { Insertable } from 'kysely';
import type { SessionCountersTable } from '../storage/schema.js';
import type { BatchRows, Receipt, WriteItem } from './model.js';

/** The rows one organization's part of a batch writes, once its receipts are computed. */
export function rowsFor(items: readonly WriteItem[], receipts: readonly Receipt[]): BatchRows {
  const rows: BatchRows = { decisions: [], receipts: [], sessions: [] };
  const sessions = new Map<string, Insertable<SessionCountersTable>>();
  for (const [i, item] of items.entries()) {
    const r = receipts[i]!;
    if (item.decision) {
      rows.decisions.push({
        ...item.decision,
        receipt_id: r.receipt_id,
        receipt_hash: r.receipt_hash,
        previous_receipt_hash: r.previous_receipt_hash,
        merkle_root: r.merkle_root,
      });
    }
    rows.receipts.push({
      organization_id: r.organization_id,
      sequence: r.sequence,
      receipt_id: r.receipt_id,
      decision_id: r.decision_id,
      receipt_hash: r.receipt_hash,
      payload: JSON.stringify(r),
      created_at: r.timestamp,
    });
    const s = item.session;
    // Absolute values: keep the furthest per counter. Items of concurrent calls can reach the batch
    // out of reservation order, so the last one is not necessarily the highest.
    if (s) {
      const key = `${s.session_id}\u0000${s.tool_name}`;
      const kept = sessions.get(key);
      if (!kept || s.calls >= kept.calls) sessions.set(key, s);
    }
  }
  rows.sessions = [...sessions.values()];
  return rows;
}
