/**
 * The decision log's filters, and decisions arriving while it is open: which of them the filters
 * can list, when the list may move, and what is said about them.
 */
import { revealString } from './reveal.js';

/**
 * The filters of `GET /v1/decisions` as the page holds them (dates as `YYYY-MM-DD`, days of this
 * browser's time zone, '' when unset; `dateQuery` turns them into what the service takes).
 */
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
 * How far this browser's clock may be from the service's: near midnight a new decision may be dated
 * either side of it, and an extra read costs less than a missed decision.
 */
export const CLOCK_SKEW_MS = 5 * 60_000;

/** The first and last instants the service takes as a date (ISO strings of four-digit years). */
const FIRST_MS = Date.parse('0000-01-01T00:00:00.000Z');
const LAST_MS = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * The first instant (`start`) or the last (`end`) of a day of the date box, `YYYY-MM-DD`, in this
 * browser's time zone: the zone the page shows every time in. Null for what is not such a date.
 */
function localDayEdge(date: string, edge: 'start' | 'end'): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!m) return null;
  const d = new Date(0);
  // setFullYear, not the Date constructor, which reads the years 0-99 as 1900-1999.
  d.setFullYear(Number(m[1]), Number(m[2]) - 1, Number(m[3]) + (edge === 'end' ? 1 : 0));
  d.setHours(0, 0, 0, 0);
  return edge === 'start' ? d.getTime() : d.getTime() - 1;
}

/**
 * The dates of the filters as `GET /v1/decisions` takes them: instants, From at the start of its
 * day and To at the end of its day, both in this browser's time zone. The service reads a bare date
 * as a whole UTC day, which is not the day the page shows: a decision listed at 7 PM on the 27th in
 * California was made on the 28th in UTC, and a bare `2026-11-27` left it out. A bound beyond
 * what the service reads (years 0000-9999 in UTC) is left out (undefined), as no bound at all.
 */
export function dateQuery(f: Pick<Filters, 'startDate' | 'endDate'>): {
  startDate: string | undefined;
  endDate: string | undefined;
} {
  const start = f.startDate ? localDayEdge(f.startDate, 'start') : null;
  const end = f.endDate ? localDayEdge(f.endDate, 'end') : null;
  return {
    startDate:
      start !== null && start >= FIRST_MS && start <= LAST_MS ? new Date(start).toISOString() : undefined,
    endDate: end !== null && end >= FIRST_MS && end < LAST_MS ? new Date(end).toISOString() : undefined,
  };
}

/**
 * Whether a decision made at `now` can fall in the filters' dates: From from the start of its day,
 * To up to the end of its day, in this browser's time zone (as `dateQuery` asks the service). A
 * range in the past (or the future) lists none.
 */
export function datesAdmitNow(f: Pick<Filters, 'startDate' | 'endDate'>, now: number): boolean {
  const start = f.startDate ? localDayEdge(f.startDate, 'start') : null;
  const end = f.endDate ? localDayEdge(f.endDate, 'end') : null;
  return (start === null || now + CLOCK_SKEW_MS >= start) && (end === null || now - CLOCK_SKEW_MS <= end);
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
