/** The pending approvals queue in words: time left, selection labels, announcements, batch outcomes. */
import { boundAction } from './ApprovalDetails.js';
import type { PendingApproval } from './api.js';
import { revealString } from './reveal.js';

/** The batch route takes at most this many ids. */
export const BATCH_SIZE = 100;

/** "3 min 20 s left", or expired once the countdown reaches 0 (approving is then refused). */
export function timeLeft(expiresAt: string, now: number): { expired: boolean; text: string } {
  const s = Math.max(0, Math.round((Date.parse(expiresAt) - now) / 1000));
  if (s === 0) return { expired: true, text: 'Expired' };
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return {
    expired: false,
    text: `${h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min ${s % 60} s` : `${s} s`} left`,
  };
}

/** `items` in consecutive slices of at most `size`. */
export function inBatches<T>(items: readonly T[], size = BATCH_SIZE): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

const clip = (s: string, max: number) => (s.length > max ? `${s.slice(0, max - 1)}…` : s);

/**
 * What tells one approval from another of the same tool, in a few words: the action it is bound to
 * (amount, payee), else its first arguments. Agent-supplied text is revealed.
 */
export function summaryOf(a: PendingApproval): string {
  const bound = boundAction(a);
  const parts = bound
    ? bound.filter(([k]) => k === 'Amount' || k === 'Payee' || k === 'Action').map(([k, v]) => `${k} ${v}`)
    : Object.entries(a.arguments)
        .slice(0, 3)
        .map(([k, v]) => `${k} ${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return revealString(clip(parts.join(', ') || 'no arguments', 80));
}

/** The accessible name of an approval's checkbox: tool, summary and the start of its id. */
export const selectLabel = (a: PendingApproval): string =>
  `Select ${revealString(a.toolName)}: ${summaryOf(a)} (${a.id.slice(0, 8)})`;

/**
 * What changed in the queue between two reads, for a polite live region: new approvals by tool, and
 * how many left it (resolved, here or elsewhere, or expired). Null when nothing changed or there was
 * no earlier read.
 */
export function queueChange(
  before: readonly string[] | null,
  after: readonly PendingApproval[],
): string | null {
  if (before === null) return null;
  const was = new Set(before);
  const now = new Set(after.map((a) => a.id));
  const added = after.filter((a) => !was.has(a.id));
  const gone = before.filter((id) => !now.has(id)).length;
  const parts: string[] = [];
  if (added.length > 0) {
    const tools = [...new Set(added.map((a) => revealString(a.toolName)))];
    parts.push(
      `${added.length} new approval${added.length === 1 ? '' : 's'} waiting: ${clip(tools.join(', '), 120)}.`,
    );
  }
  if (gone > 0) parts.push(`${gone} approval${gone === 1 ? '' : 's'} no longer waiting.`);
  return parts.length > 0 ? `${parts.join(' ')} ${after.length} waiting in all.` : null;
}

/**
 * The outcome of resolving `total` approvals in batches: null when all were resolved, else how many
 * were and why the others were not (the same reason said once, with its count).
 */
export function batchOutcome(action: 'approve' | 'deny', total: number, failures: string[]): string | null {
  if (failures.length === 0) return null;
  const counts = new Map<string, number>();
  for (const f of failures) counts.set(f, (counts.get(f) ?? 0) + 1);
  const reasons = [...counts].map(([m, n]) => (n > 1 ? `${m} (${n} approvals)` : m)).join('; ');
  const done = total - failures.length;
  const verb = action === 'approve' ? 'approved' : 'denied';
  return `${done} of ${total} ${verb}; ${failures.length} not resolved: ${reasons}`;
}
