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

/**
 * Why the filters cannot be applied as they are, else null: a range that ends before it starts, or
 * one whose days this browser's time zone skipped. Said rather than asked: an empty list would read
 * as a day on which nothing happened, and the service refuses a start after the end.
 */
export function filterProblem(f: Pick<Filters, 'startDate' | 'endDate'>): string | null {
  if (f.startDate && f.endDate && f.startDate > f.endDate)
    return 'From is after To: no decision can match. Change one of the dates.';
  if (noDayBetween(f)) {
    const zone = timeZoneName();
    const where = zone ? `your time zone (${zone})` : 'your time zone';
    return f.startDate === f.endDate
      ? `${f.startDate} does not exist in ${where}: its clocks skipped that day, so no decision can match. Choose another day.`
      : `No day from ${f.startDate} to ${f.endDate} exists in ${where}: its clocks skipped them, so no decision can match. Choose other days.`;
  }
  return null;
}

/**
 * How far this browser's clock may be from the service's: near midnight a new decision may be dated
 * either side of it, and an extra read costs less than a missed decision.
 */
export const CLOCK_SKEW_MS = 5 * 60_000;

/** The first and last instants the service takes as a date (ISO strings of four-digit years). */
const FIRST_MS = Date.parse('0000-01-01T00:00:00.000Z');
const LAST_MS = Date.parse('9999-12-31T23:59:59.999Z');

const HOUR_MS = 3_600_000;
/**
 * More than any offset from UTC a time zone has had (local mean times reached almost 16 hours): the
 * instants a local day starts and ends lie within this of its wall-clock midnights read as UTC.
 */
const REACH_MS = 18 * HOUR_MS;

/** The wall-clock time this browser's time zone shows at instant `t`, read as if it were UTC. */
function wallAt(t: number): number {
  const d = new Date(t);
  const wall = new Date(0);
  // setUTCFullYear, not Date.UTC, which reads the years 0-99 as 1900-1999.
  wall.setUTCFullYear(d.getFullYear(), d.getMonth(), d.getDate());
  wall.setUTCHours(d.getHours(), d.getMinutes(), d.getSeconds(), d.getMilliseconds());
  return wall.getTime();
}

/** The zone's offset at `t`: what its clocks show minus UTC. */
const offsetAt = (t: number): number => wallAt(t) - t;

/**
 * The first instant in (a, b] whose offset is not the offset at `a`: where the zone's clocks moved
 * (once) between the two instants.
 */
function changeBetween(a: number, b: number): number {
  const before = offsetAt(a);
  let lo = a;
  let hi = b;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetAt(mid) === before) lo = mid;
    else hi = mid;
  }
  return hi;
}

/*
 * The two searches below walk the zone's clock an hour at a time, and find the exact instant where
 * it passes a wall-clock time, the moment it moved included. They take no more from the browser than
 * what its clocks show at a given instant: no rule of the zone is assumed (a gap at midnight, a day
 * skipped across the date line, an hour repeated), only that no zone moves its clocks twice within
 * one hour.
 */

/** The first instant at which this browser's clocks show `wall` (wall-clock time read as UTC) or later. */
function firstAtOrAfter(wall: number): number {
  // At wall - REACH_MS every clock still shows an earlier time; by wall + REACH_MS every one has passed it.
  // Each step starts where the clocks show a time before `wall` (the previous step found no later one).
  for (let a = wall - REACH_MS, b = a + HOUR_MS; b <= wall + REACH_MS; a = b, b += HOUR_MS) {
    const before = offsetAt(a);
    const after = offsetAt(b);
    if (before !== after) {
      const moved = changeBetween(a, b);
      // Before they moved: they pass `wall` there, though they may step back below it when they move.
      if (wall - before < moved) return wall - before;
      // From the moment they moved (a gap: the first time shown past it).
      if (b + after >= wall) return Math.max(moved, wall - after);
    } else if (b + after >= wall) return wall - after;
  }
  return wall + REACH_MS;
}

/** The last instant at which this browser's clocks show a time before `wall`. */
function lastBefore(wall: number): number {
  // Each step ends where the clocks show `wall` or later (the previous step found no earlier time).
  for (let b = wall + REACH_MS, a = b - HOUR_MS; a >= wall - REACH_MS; b = a, a -= HOUR_MS) {
    const before = offsetAt(a);
    const after = offsetAt(b);
    if (before !== after) {
      const moved = changeBetween(a, b);
      // After they moved: below `wall` there (an hour shown twice: its second time), though they may
      // have shown `wall` or later before they moved.
      if (wall - after - 1 >= moved) return wall - after - 1;
      // Until they moved.
      if (a + before < wall) return Math.min(moved - 1, wall - before - 1);
    } else if (a + before < wall) return wall - before - 1;
  }
  return wall - REACH_MS;
}

/** Midnight of a day of the date box, `YYYY-MM-DD` (`next`: of the day after), read as UTC; null if not such a date. */
function midnight(date: string, next = false): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!m) return null;
  const d = new Date(0);
  d.setUTCFullYear(Number(m[1]), Number(m[2]) - 1, Number(m[3]) + (next ? 1 : 0));
  return d.getTime();
}

/**
 * The first instant (`start`) or the last (`end`) of a day of the date box, `YYYY-MM-DD`, in this
 * browser's time zone (the zone the page shows every time in): the first instant its clocks show
 * that day, and the last. Where midnight does not exist (the clocks jump from 23:59:59 to 01:00, as
 * in Santiago, Havana or Beirut on some days) the day starts at 01:00. A day the zone skipped
 * (30 December 2011 in Samoa) starts after it ends: the start of the day after, and the end of the
 * day before. Null for what is not such a date.
 */
function localDayEdge(date: string, edge: 'start' | 'end'): number | null {
  const wall = midnight(date, edge === 'end');
  if (wall === null) return null;
  return edge === 'start' ? firstAtOrAfter(wall) : lastBefore(wall);
}

/**
 * The dates of the filters as `GET /v1/decisions` takes them: instants, From at the start of its
 * day and To at the end of its day, both in this browser's time zone. The service reads a bare date
 * as a whole UTC day, which is not the day the page shows: a decision listed at 7 PM on the 27th in
 * California was made on the 28th in UTC, and a bare `2026-11-27` left it out. A bound beyond
 * what the service reads (years 0000-9999 in UTC) is left out (undefined), as no bound at all.
 * Dates that hold no day of this zone (`noDayBetween`) give a start after the end: they are not
 * sent (filterProblem says why).
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
 * Whether From to To (both set, From not after To) holds no day of this browser's time zone: each
 * of its days was skipped (Samoa went from 29 to 31 December 2011). No decision can match, and the
 * service refuses a start after the end.
 */
export function noDayBetween(f: Pick<Filters, 'startDate' | 'endDate'>): boolean {
  if (!f.startDate || !f.endDate) return false;
  const start = localDayEdge(f.startDate, 'start');
  const end = localDayEdge(f.endDate, 'end');
  return start !== null && end !== null && start > end;
}

/** The name of this browser's time zone (`Europe/Berlin`), or null where the browser does not say. */
export function timeZoneName(): string | null {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || null;
  } catch {
    return null;
  }
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
 * What the page says of a tool filter with spaces before or after the name, else null. The filter
 * is not trimmed: the service takes any tool name without control characters, spaces at either end
 * included, and matches the filter exactly, so "  pay" finds only a tool named so. But such names are
 * rare and a pasted name often carries spaces: the page says so and offers the name without them.
 */
export function toolFilterSpaces(toolName: string): { trimmed: string; said: string } | null {
  const trimmed = toolName.trim();
  if (trimmed === toolName) return null;
  const before = toolName.length - toolName.trimStart().length;
  const after = toolName.length - toolName.trimEnd().length;
  const spaces = (n: number) => `${n} space${n === 1 ? '' : 's'}`;
  const where =
    trimmed === ''
      ? `is only spaces (${toolName.length})`
      : before > 0 && after > 0
        ? `has ${spaces(before)} before the name and ${spaces(after)} after it`
        : `has ${spaces(before || after)} ${before > 0 ? 'before' : 'after'} the name`;
  return {
    trimmed,
    said: `The tool filter ${where}: tool names are matched exactly, spaces included (a tool may have them in its name), so only decisions of a tool named with ${trimmed === '' ? 'those spaces' : 'them'} are listed.`,
  };
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
