import { invalid } from '../../lib/errors.js';
import type { DecisionFilter } from './repository.js';

/*
 * Numeric and date query parameters are declared as strings (the validator's own conversion reads
 * `1.5` as 1 and `0x10` as 16) and parsed here, in one place, with messages that name the
 * parameter as body errors do.
 */

const INT_RE = /^\d{1,16}$/;

/**
 * A decimal integer in [min, max]; `fallback` when absent. `name` is a query parameter's, or a path
 * such as `params/treeSize` for a parameter found elsewhere.
 */
export function intParam(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
  fallback: number,
): number;
export function intParam(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
  fallback?: undefined,
): number | undefined;
export function intParam(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
  fallback?: number,
): number | undefined {
  if (raw === undefined) return fallback;
  const n = INT_RE.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    const range = max >= Number.MAX_SAFE_INTEGER - 1 ? `>= ${min}` : `from ${min} to ${max}`;
    throw invalid(`${name.includes('/') ? name : `querystring/${name}`} must be an integer ${range}`);
  }
  return n;
}

// A calendar date, optionally followed by a time and an offset (none means UTC).
const DATE_RE =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/;

const DAY_MS = 86_400_000;
/** The first and last instants an ISO 8601 string of four-digit year holds; bounds stay inside them. */
const FIRST_MS = Date.parse('0000-01-01T00:00:00.000Z');
const LAST_MS = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * Parses an ISO 8601 date or date-time into a half-open bound on created_at: a start bound is
 * inclusive; an end bound is returned exclusive, so a date-only end includes that whole UTC day and a
 * date-time end includes that very millisecond. The instant must lie in the years 0000-9999, where
 * ISO strings compare as instants do; an end that includes 9999-12-31T23:59:59.999Z is no bound at all
 * (undefined), since its exclusive form would be a year 10000 that sorts before every other.
 */
export function dateParam(name: string, raw: string | undefined, edge: 'start' | 'end'): string | undefined {
  if (raw === undefined) return undefined;
  const m = DATE_RE.exec(raw);
  const bad = () =>
    invalid(`querystring/${name} must be an ISO 8601 date (2026-11-21) or date-time (2026-11-21T10:00:00Z)`);
  if (!m) throw bad();
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  // setUTCFullYear, not Date.UTC, which reads the years 0-99 as 1900-1999.
  const day = new Date(0).setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  // Both roll 2026-02-30 over into March: a real date survives the round trip.
  if (new Date(day).toISOString().slice(0, 10) !== `${y}-${mo}-${d}`) throw bad();
  const bound = (first: number, last: number) => {
    const instant = edge === 'start' ? first : last;
    if (instant < FIRST_MS || instant > LAST_MS)
      throw invalid(`querystring/${name} is outside the years 0000-9999 (UTC)`);
    if (edge === 'start') return new Date(instant).toISOString();
    return instant === LAST_MS ? undefined : new Date(instant + 1).toISOString();
  };
  if (h === undefined) return bound(day, day + DAY_MS - 1);
  if (Number(h) > 23 || Number(mi) > 59 || Number(s ?? 0) > 59) throw bad();
  let ms = day + Number(h) * 3_600_000 + Number(mi) * 60_000 + Number(s ?? 0) * 1000;
  ms += Math.floor(Number(`0.${frac ?? '0'}`) * 1000);
  if (zone && zone.toUpperCase() !== 'Z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const offset = Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2));
    if (Number(digits.slice(0, 2)) > 23 || Number(digits.slice(2)) > 59) throw bad();
    ms -= sign * offset * 60_000;
  }
  return bound(ms, ms);
}

// require_approval is accepted too: escalated decisions are stored with that value.
const DECISIONS = ['allow', 'deny', 'require_approval'];

export interface ListQueryInput {
  limit?: string;
  offset?: string;
  projectId?: string;
  toolName?: string;
  decision?: string;
  startDate?: string;
  endDate?: string;
}

/** GET /v1/decisions query → repository filter and page. */
export function parseListQuery(q: ListQueryInput): { filter: DecisionFilter; limit: number; offset: number } {
  const limit = intParam('limit', q.limit, 1, 100, 50);
  const offset = intParam('offset', q.offset, 0, Number.MAX_SAFE_INTEGER, 0);
  const from = dateParam('startDate', q.startDate, 'start');
  const before = dateParam('endDate', q.endDate, 'end');
  if (from !== undefined && before !== undefined && from >= before) {
    throw invalid('querystring/startDate must not be after querystring/endDate');
  }
  const filter: DecisionFilter = {};
  if (q.projectId !== undefined) filter.projectId = q.projectId;
  if (q.toolName !== undefined) filter.toolName = q.toolName;
  if (q.decision !== undefined) {
    if (!DECISIONS.includes(q.decision)) {
      throw invalid(`querystring/decision must be one of ${DECISIONS.join(', ')}`);
    }
    filter.decision = q.decision;
  }
  if (from !== undefined) filter.from = from;
  if (before !== undefined) filter.before = before;
  return { filter, limit, offset };
}
