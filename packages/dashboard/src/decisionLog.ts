/**
 * The decision log's filters, and decisions arriving while it is open: which of them the filters
 * can list, when the list may move, and what is said about them.
 */
import { revealString } from './reveal.js';

/** The filters of `GET /v1/decisions` as the page holds them (dates as `YYYY-MM-DD`, '' when unset). */
export interface Filters {
  toolName: string;
  decision: string;
  projectId: string;
  startDate: string;
  endDate: string;
}

export const NO_FILTERS: Filters = { toolName: '', decision: '', projectId: '', startDate: '', endDate: '' };

/** Why the filters cannot be applied as they are (a range that ends before it starts), else null. */
export function filterProblem(f: Pick<Filters, 'startDate' | 'endDate'>): string | null {
  return f.startDate && f.endDate && f.startDate > f.endDate
    ? 'From is after To: no decision can match. Change one of the dates.'
    : null;
}

/**
 * How far this browser's clock may be from the service's: near midnight UTC a new decision may be
 * dated either side of it, and an extra read costs less than a missed decision.
 */
export const CLOCK_SKEW_MS = 5 * 60_000;

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/**
 * Whether a decision made at `now` can fall in the filters' dates: the service reads a date as a
 * whole UTC day, From inclusive, To up to its end. A range in the past (or the future) lists none.
 */
export function datesAdmitNow(f: Pick<Filters, 'startDate' | 'endDate'>, now: number): boolean {
  return (
    (!f.startDate || dayOf(now + CLOCK_SKEW_MS) >= f.startDate) &&
    (!f.endDate || dayOf(now - CLOCK_SKEW_MS) <= f.endDate)
  );
}

/**
 * Whether the decision a `decision.created` event announces (`toolName`, `decision`, `projectId`)
 * can be listed under `filters`, received at `now`. A field the event does not carry is no reason to
 * leave it out: the list is read to know.
 */
export function mayList(event: unknown, f: Filters, now: number): boolean {
  if (!datesAdmitNow(f, now)) return false;
  const e = (typeof event === 'object' && event !== null ? event : {}) as Record<string, unknown>;
  const differs = (field: string, wanted: string) =>
    wanted !== '' && typeof e[field] === 'string' && e[field] !== wanted;
  return (
    !differs('toolName', f.toolName) && !differs('decision', f.decision) && !differs('projectId', f.projectId)
  );
}

/**
 * Whether new decisions may move the list in front of the person: only on the first page with no
 * decision's details open. Elsewhere they are counted and offered instead.
 */
export const follows = (view: { offset: number; open: string | null }): boolean =>
  view.offset === 0 && view.open === null;

/** "1 new decision", "3 new decisions". */
export const newDecisions = (n: number): string => `${n} new decision${n === 1 ? '' : 's'}`;

const clip = (s: string, max: number) => (s.length > max ? `${s.slice(0, max - 1)}…` : s);

/** What arrived since the last announcement. */
export interface Heard {
  /** Decisions added to the list in front of the person. */
  shown: number;
  /** Their tools, as the service sent them, newest first. */
  tools: string[];
  /** New decisions waiting behind the "new decisions" button, when that number grew; else 0. */
  waiting: number;
}

/**
 * The words for a polite live region, said at most every few seconds: how many decisions were added
 * and of which tools (revealed), and how many wait to be shown. Null when there is nothing to say.
 */
export function arrivalText({ shown, tools, waiting }: Heard): string | null {
  const parts: string[] = [];
  if (shown > 0) {
    const names = [...new Set(tools.map((t) => revealString(t)))];
    parts.push(`${newDecisions(shown)}: ${clip(names.join(', '), 120)}.`);
  }
  if (waiting > 0) parts.push(`${newDecisions(waiting)} not shown yet.`);
  return parts.length > 0 ? parts.join(' ') : null;
}
