import type { Insertable } from 'kysely';
import type { SessionCountersTable } from '../storage/schema.js';
import type { BatchRows, Receipt, WriteItem } from './model.js';
import { receiptPayload } from './receipt.js';

/**
 * The rows one organization's part of a batch writes on PostgreSQL, once its receipts are computed.
 * `payloads` are the receipts' stored forms as appendReceipts returned them (computed here when
 * absent). Decision rows have every column, absent ones null. (The embedded store binds arrays of
 * values instead: wire.ts.)
 */
export function rowsFor(
  items: readonly WriteItem[],
  receipts: readonly Receipt[],
  payloads?: readonly string[],
): BatchRows {
  const rows: BatchRows = { decisions: [], receipts: [], sessions: [] };
  const sessions: Insertable<SessionCountersTable>[] = [];
  for (const [i, item] of items.entries()) {
    const r = receipts[i]!;
    const d = item.decision;
    if (d) {
      rows.decisions.push({
        id: d.id,
        organization_id: d.organization_id,
        project_id: d.project_id ?? null,
        tool_name: d.tool_name,
        arguments: d.arguments,
        context: d.context,
        decision: d.decision,
        mode: d.mode,
        reason: d.reason,
        failed_argument: d.failed_argument ?? null,
        matched_exception: d.matched_exception ?? null,
        validations: d.validations ?? null,
        latency_ms: d.latency_ms,
        source: d.source,
        policy_version: d.policy_version ?? null,
        receipt_id: r.receipt_id,
        receipt_hash: r.receipt_hash,
        previous_receipt_hash: r.previous_receipt_hash,
        merkle_root: r.merkle_root,
        created_at: d.created_at,
      });
    }
    rows.receipts.push({
      organization_id: r.organization_id,
      sequence: r.sequence,
      receipt_id: r.receipt_id,
      decision_id: r.decision_id,
      receipt_hash: r.receipt_hash,
      payload: payloads?.[i] ?? receiptPayload(r),
      created_at: r.timestamp,
    });
    if (item.session) sessions.push(item.session);
  }
  rows.sessions = furthest(sessions, (s) => [s.session_id, s.tool_name, s.calls]);
  return rows;
}

/**
 * Session counter rows hold absolute values: of the rows of one counter (session and tool) this
 * keeps the furthest, in the order each counter first appears. Items of concurrent calls can reach
 * a batch out of reservation order, so the last one is not necessarily the highest.
 */
export function furthest<T>(rows: readonly T[], counter: (row: T) => [string, string, number]): T[] {
  const kept = new Map<string, { row: T; calls: number }>();
  for (const row of rows) {
    const [session, tool, calls] = counter(row);
    const key = `${session}\u0000${tool}`;
    const k = kept.get(key);
    if (!k || calls >= k.calls) kept.set(key, { row, calls });
  }
  return [...kept.values()].map((k) => k.row);
}
