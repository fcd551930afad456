/**
 * The Drafts page's list as it follows the organization: what a new read of the drafts changes on
 * the cards shown, and what it leaves as the person read it.
 */
import type { PolicyDraft } from './api.js';
import { revealString } from './reveal.js';

/** One card of the Drafts page. */
export interface DraftView {
  /** The draft as its card shows it: what the person reads, and what approving it applies (If-Match). */
  shown: PolicyDraft;
  /**
   * Set when the service's draft is no longer the one shown: the draft now (edited since: another
   * revision), or null (deleted since). The card keeps what the person read and says so.
   */
  current?: PolicyDraft | null;
  /** What became of the draft since the card showed it, when someone else moved it (approved, …). */
  note: string | null;
}

/** Waiting for review first, then the most recently changed. */
export function reviewOrder(drafts: readonly PolicyDraft[]): PolicyDraft[] {
  const rank = (d: PolicyDraft) => (d.status === 'pending_review' ? 0 : 1);
  return [...drafts].sort((a, b) => rank(a) - rank(b) || b.updatedAt.localeCompare(a.updatedAt));
}

const when = (at: string | null) => (at ? ` on ${new Date(at).toLocaleString()}` : '');

/**
 * What to tell the person when a draft they were shown moved to another status: approved or
 * rejected by someone else, submitted for review, withdrawn from it. Null when its status is the
 * same, or when they approved or rejected it themselves (this page, or another of theirs).
 */
export function statusNote(before: PolicyDraft, after: PolicyDraft, userId: string): string | null {
  if (after.status === before.status) return null;
  switch (after.status) {
    case 'approved':
    case 'rejected': {
      if (after.reviewedBy === userId) return null;
      const who = after.reviewedBy ? revealString(after.reviewedBy) : 'someone else';
      const verb = after.status === 'approved' ? 'Approved' : 'Rejected';
      return `${verb} by ${who}${when(after.reviewedAt)}, since you read it.`;
    }
    case 'pending_review':
      return 'Submitted for review since you read it.';
    case 'draft':
      return 'Withdrawn from review since you read it: it cannot be approved or rejected until it is submitted again.';
  }
}

/** A card showing `now`, the draft it showed before being `view` (its note kept unless the status moved). */
function showing(view: DraftView, now: PolicyDraft, userId: string): DraftView {
  return {
    shown: now,
    note: now.status === view.shown.status ? view.note : statusNote(view.shown, now, userId),
  };
}

/**
 * The cards after a read of the drafts (`read`, the service's whole list). A card whose content is
 * unchanged (the same revision) shows the draft as read, its status included, with a note when
 * someone else moved it. A card whose draft was edited or deleted since keeps what the person
 * read, with the draft as it is now beside it (`current`): it changes only when they ask, or act on
 * it (`adopt`, the ids of such cards); a deleted draft's card goes only when they ask. New drafts come first, in review order; the cards shown keep
 * their places, so that nothing moves under the person but what comes in above.
 */
export function nextViews(
  prev: readonly DraftView[] | null,
  read: readonly PolicyDraft[],
  { adopt = [], userId }: { adopt?: readonly string[]; userId: string },
): DraftView[] {
  if (prev === null) return reviewOrder(read).map((shown) => ({ shown, note: null }));
  const now = new Map(read.map((d) => [d.id, d]));
  const known = new Set(prev.map((v) => v.shown.id));
  const fresh = reviewOrder(read.filter((d) => !known.has(d.id))).map((shown) => ({ shown, note: null }));
  const kept = prev.flatMap((view): DraftView[] => {
    const d = now.get(view.shown.id) ?? null;
    // A draft deleted since: its card stays, saying so, also when the person acted on it (an
    // approval refused with 404 must not take the card, and with it the reason, away).
    if (d === null) return [{ ...view, current: null }];
    if (adopt.includes(view.shown.id)) return [showing(view, d, userId)];
    if (d.revision !== view.shown.revision) return [{ ...view, current: d }];
    return [showing(view, d, userId)];
  });
  return [...fresh, ...kept];
}

/** The cards once the person asked to see draft `id` as it is now (or, deleted, to drop its card). */
export function showCurrent(views: readonly DraftView[], id: string, userId: string): DraftView[] {
  return views.flatMap((view): DraftView[] => {
    if (view.shown.id !== id || view.current === undefined) return [view];
    return view.current === null ? [] : [showing(view, view.current, userId)];
  });
}

/** What a card whose draft changed since it was read says, beside what it still shows. */
export function heldText(current: PolicyDraft | null): string {
  return current === null
    ? 'This draft was deleted since you read it: nothing of it can be approved.'
    : 'This draft was edited since you read it. What is shown is the version you read, and approving or rejecting it is refused: show the current version to review that one.';
}

const MAX_SAID = 3;

/**
 * What a screen reader is told after a read, said politely: drafts that came in, and what became of
 * drafts shown (moved by someone else, edited, deleted). Null when nothing changed that way.
 */
export function draftChanges(prev: readonly DraftView[] | null, next: readonly DraftView[]): string | null {
  // The first read is what the page shows, not a change.
  if (prev === null) return null;
  const before = new Map(prev.map((v) => [v.shown.id, v]));
  const said: string[] = [];
  const arrived = { review: 0, draft: 0, decided: 0 };
  for (const v of next) {
    const name = revealString(v.shown.name);
    const was = before.get(v.shown.id);
    if (!was) {
      if (v.shown.status === 'pending_review') arrived.review++;
      else if (v.shown.status === 'draft') arrived.draft++;
      // Submitted and decided between two reads (the event stream down meanwhile).
      else arrived.decided++;
      continue;
    }
    if (v.current === null && was.current !== null) said.push(`${name} was deleted since you read it.`);
    else if (v.current && v.current.revision !== was.current?.revision)
      said.push(`${name} was edited since you read it.`);
    else if (v.note && v.note !== was.note) said.push(`${name}: ${v.note}`);
  }
  const count = (n: number, what: string) => `${n} new draft${n === 1 ? '' : 's'} ${what}.`;
  const head = [
    ...(arrived.review > 0 ? [count(arrived.review, 'waiting for review')] : []),
    ...(arrived.draft > 0 ? [count(arrived.draft, 'being written')] : []),
    ...(arrived.decided > 0 ? [count(arrived.decided, 'already approved or rejected')] : []),
  ];
  const rest =
    said.length > MAX_SAID ? [...said.slice(0, MAX_SAID), `${said.length - MAX_SAID} more changed.`] : said;
  const all = [...head, ...rest];
  return all.length > 0 ? all.join(' ') : null;
}
