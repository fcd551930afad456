import { describe, expect, it } from 'vitest';
import type { PolicyDraft } from './api.js';
import {
  type DraftView,
  draftChanges,
  heldText,
  nextViews,
  reviewOrder,
  showCurrent,
  statusNote,
} from './draftList.js';

const draft = (id: string, over: Partial<PolicyDraft> = {}): PolicyDraft => ({
  id,
  projectId: 'p1',
  name: `Draft ${id}`,
  description: '',
  status: 'pending_review',
  createdByAgentId: 'policy-bot',
  rules: [],
  createdAt: '2030-01-01T00:00:00.000Z',
  updatedAt: '2030-01-01T00:00:00.000Z',
  reviewedBy: null,
  reviewedAt: null,
  revision: `rev-${id}-1`,
  ...over,
});
const me = 'alice';
const ids = (views: DraftView[]) => views.map((v) => v.shown.id);

describe('the cards after a read of the drafts', () => {
  it('shows the first read in review order: waiting for review first, then the most recently changed', () => {
    const read = [
      draft('a', { status: 'approved', updatedAt: '2030-01-03T00:00:00.000Z' }),
      draft('b', { updatedAt: '2030-01-01T00:00:00.000Z' }),
      draft('c', { status: 'draft', updatedAt: '2030-01-02T00:00:00.000Z' }),
      draft('d', { updatedAt: '2030-01-02T00:00:00.000Z' }),
    ];
    expect(ids(nextViews(null, read, { userId: me }))).toEqual(['d', 'b', 'a', 'c']);
    expect(reviewOrder(read).map((d) => d.id)).toEqual(['d', 'b', 'a', 'c']);
  });

  it('adds new drafts on top and keeps the cards shown where they are', () => {
    const first = nextViews(null, [draft('a'), draft('b', { status: 'draft' })], { userId: me });
    expect(ids(first)).toEqual(['a', 'b']);
    // b was submitted (it would now sort first) and c came in: only c moves anything, from above.
    const next = nextViews(
      first,
      [draft('a'), draft('b', { updatedAt: '2030-02-01T00:00:00.000Z' }), draft('c')],
      { userId: me },
    );
    expect(ids(next)).toEqual(['c', 'a', 'b']);
    expect(next[2]!.shown.status).toBe('pending_review');
    expect(next[2]!.note).toBe('Submitted for review since you read it.');
    expect(draftChanges(first, next)).toBe(
      '1 new draft waiting for review. Draft b: Submitted for review since you read it.',
    );
  });

  it('shows a draft someone else approved or rejected as it is now, and says who', () => {
    const first = nextViews(null, [draft('a'), draft('b')], { userId: me });
    const next = nextViews(
      first,
      [
        draft('a', { status: 'approved', reviewedBy: 'bob', reviewedAt: '2030-01-05T10:00:00.000Z' }),
        draft('b', { status: 'rejected', reviewedBy: 'apikey:k1' }),
      ],
      { userId: me },
    );
    expect(next.map((v) => [v.shown.status, v.current, v.note])).toEqual([
      ['approved', undefined, expect.stringMatching(/^Approved by bob on .+, since you read it\.$/)],
      ['rejected', undefined, 'Rejected by apikey:k1, since you read it.'],
    ]);
    expect(draftChanges(first, next)).toMatch(/^Draft a: Approved by bob .* Draft b: Rejected by apikey:k1/);
    // The note stays while nothing else happens to the draft; said once.
    const again = nextViews(
      next,
      next.map((v) => v.shown),
      { userId: me },
    );
    expect(again.map((v) => v.note)).toEqual(next.map((v) => v.note));
    expect(draftChanges(next, again)).toBeNull();
  });

  it('counts new drafts by their status: waiting, being written, or already decided', () => {
    const first = nextViews(null, [draft('a')], { userId: me });
    const next = nextViews(
      first,
      [
        draft('a'),
        draft('b'),
        draft('c', { status: 'draft' }),
        draft('d', { status: 'rejected', reviewedBy: 'bob' }),
        draft('e', { status: 'approved', reviewedBy: 'bob' }),
      ],
      { userId: me },
    );
    expect(draftChanges(first, next)).toBe(
      '1 new draft waiting for review. 1 new draft being written. 2 new drafts already approved or rejected.',
    );
  });

  it('says nothing of what the person did themselves', () => {
    const first = nextViews(null, [draft('a')], { userId: me });
    const mine = draft('a', { status: 'approved', reviewedBy: me });
    expect(statusNote(first[0]!.shown, mine, me)).toBeNull();
    const next = nextViews(first, [mine], { adopt: ['a'], userId: me });
    expect(next[0]).toEqual({ shown: mine, note: null });
    expect(draftChanges(first, next)).toBeNull();
  });

  it('keeps what the person read of a draft edited since, with the draft as it is now beside it', () => {
    const first = nextViews(null, [draft('a')], { userId: me });
    const edited = draft('a', { revision: 'rev-a-2', rules: [] });
    const next = nextViews(first, [edited], { userId: me });
    expect(next[0]!.shown).toBe(first[0]!.shown);
    expect(next[0]!.current).toBe(edited);
    expect(draftChanges(first, next)).toBe('Draft a was edited since you read it.');
    // Read again, unchanged: still held, not said again.
    const again = nextViews(next, [edited], { userId: me });
    expect(again[0]!.shown).toBe(first[0]!.shown);
    expect(draftChanges(next, again)).toBeNull();
    // Shown when asked for.
    expect(showCurrent(again, 'a', me)).toEqual([{ shown: edited, note: null }]);
    // Or when the person acted on the card (its approval was refused, say).
    expect(nextViews(again, [edited], { adopt: ['a'], userId: me })).toEqual([{ shown: edited, note: null }]);
  });

  it('keeps the card of a draft deleted since, until the person removes it', () => {
    const first = nextViews(null, [draft('a'), draft('b')], { userId: me });
    const next = nextViews(first, [draft('b')], { userId: me });
    expect(next.map((v) => [v.shown.id, v.current])).toEqual([
      ['a', null],
      ['b', undefined],
    ]);
    expect(draftChanges(first, next)).toBe('Draft a was deleted since you read it.');
    expect(ids(showCurrent(next, 'a', me))).toEqual(['b']);
    // Acting on it (an approval refused: the draft is gone) keeps it too, saying it was deleted.
    expect(nextViews(next, [draft('b')], { adopt: ['a'], userId: me }).map((v) => v.current)).toEqual([
      null,
      undefined,
    ]);
  });

  it('keeps the card of a draft deleted in another tab when approving it is refused, saying so', () => {
    const first = nextViews(null, [draft('a'), draft('b')], { userId: me });
    // Approve answered 404: the page reads the drafts again with the card adopted.
    const next = nextViews(first, [draft('b')], { adopt: ['a'], userId: me });
    expect(next.map((v) => [v.shown.id, v.current])).toEqual([
      ['a', null],
      ['b', undefined],
    ]);
    expect(heldText(next[0]!.current ?? null)).toBe(
      'This draft was deleted since you read it: nothing of it can be approved.',
    );
    expect(draftChanges(first, next)).toBe('Draft a was deleted since you read it.');
  });

  it('notes a draft withdrawn from review, and reveals what others wrote', () => {
    const first = nextViews(null, [draft('a', { name: 'pay\u202E' })], { userId: me });
    const next = nextViews(first, [draft('a', { name: 'pay\u202E', status: 'draft' })], { userId: me });
    expect(next[0]!.note).toMatch(/^Withdrawn from review since you read it/);
    expect(draftChanges(first, next)).toMatch(/^pay\\u202E: Withdrawn/);
    expect(statusNote(draft('a'), draft('a', { status: 'rejected', reviewedBy: 'bob\u200B' }), me)).toBe(
      'Rejected by bob\\u200B, since you read it.',
    );
  });
});
