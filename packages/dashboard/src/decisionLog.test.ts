import { afterEach, describe, expect, it } from 'vitest';
import {
  arrivalText,
  dateQuery,
  datesAdmitNow,
  type Filters,
  follows,
  mayList,
  NO_FILTERS,
  newDecisions,
} from './decisionLog.js';

const at = Date.parse('2030-06-15T12:00:00.000Z');

/** The browser's time zone, for dates: the page shows times in it, and the date filters follow it. */
const zone = process.env.TZ;
const inZone = (tz: string) => {
  process.env.TZ = tz;
};
afterEach(() => {
  if (zone === undefined) delete process.env.TZ;
  else process.env.TZ = zone;
});
const filters = (f: Partial<Filters>): Filters => ({ ...NO_FILTERS, ...f });
const event = {
  decisionId: 'd1',
  toolName: 'wire',
  decision: 'deny',
  mode: 'deterministic',
  projectId: 'p1',
};

describe('which new decisions the filters list', () => {
  it('lists every new decision without filters, and those of the tool, decision and project chosen', () => {
    expect(mayList(event, NO_FILTERS, at)).toBe(true);
    expect(mayList(event, filters({ toolName: 'wire', decision: 'deny', projectId: 'p1' }), at)).toBe(true);
    expect(mayList(event, filters({ toolName: 'pay' }), at)).toBe(false);
    // The service matches the tool name exactly.
    expect(mayList(event, filters({ toolName: 'wir' }), at)).toBe(false);
    expect(mayList(event, filters({ decision: 'allow' }), at)).toBe(false);
    expect(mayList(event, filters({ decision: 'require_approval' }), at)).toBe(false);
    expect(
      mayList({ ...event, decision: 'require_approval' }, filters({ decision: 'require_approval' }), at),
    ).toBe(true);
    expect(mayList(event, filters({ projectId: 'p2' }), at)).toBe(false);
  });

  it('reads the list when the event does not say (a field missing, data that is not an object)', () => {
    expect(mayList({ toolName: 'wire' }, filters({ projectId: 'p2', decision: 'allow' }), at)).toBe(true);
    expect(mayList(null, filters({ toolName: 'wire' }), at)).toBe(true);
    expect(mayList('not json', filters({ toolName: 'wire' }), at)).toBe(true);
  });

  it('lists none while the dates end before today or start after it (whole days)', () => {
    inZone('UTC');
    expect(datesAdmitNow(filters({ startDate: '2030-06-15', endDate: '2030-06-15' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ startDate: '2030-01-01' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-12-31' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-06-14' }), at)).toBe(false);
    expect(datesAdmitNow(filters({ startDate: '2030-06-16' }), at)).toBe(false);
    expect(mayList(event, filters({ endDate: '2030-06-14' }), at)).toBe(false);
  });

  it('gives a clock a few minutes off the benefit of the doubt around midnight', () => {
    inZone('UTC');
    const justAfter = Date.parse('2030-06-16T00:02:00.000Z');
    const justBefore = Date.parse('2030-06-15T23:58:00.000Z');
    expect(datesAdmitNow(filters({ endDate: '2030-06-15' }), justAfter)).toBe(true);
    expect(datesAdmitNow(filters({ startDate: '2030-06-16' }), justBefore)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-06-15' }), Date.parse('2030-06-16T00:10:00.000Z'))).toBe(
      false,
    );
  });
});

describe('the dates of the filters, in the time zone the page shows times in', () => {
  it('asks for From and To as the whole local days, not as UTC days', () => {
    // A decision made at 03:51 UTC on the 28th is shown at 7:51 PM on the 27th in California:
    // filtering the 27th must list it, and the 28th must not.
    inZone('America/Los_Angeles');
    const made = Date.parse('2026-11-28T03:51:00.000Z');
    const day27 = dateQuery({ startDate: '2026-11-27', endDate: '2026-11-27' });
    expect(day27).toEqual({
      startDate: '2026-11-27T08:00:00.000Z',
      endDate: '2026-11-28T07:59:59.999Z',
    });
    expect(made >= Date.parse(day27.startDate!) && made <= Date.parse(day27.endDate!)).toBe(true);
    const day28 = dateQuery({ startDate: '2026-11-28', endDate: '' });
    expect(day28).toEqual({ startDate: '2026-11-28T08:00:00.000Z', endDate: undefined });
    expect(made >= Date.parse(day28.startDate!)).toBe(false);

    // East of UTC the local day starts the evening before, in UTC.
    inZone('Asia/Tokyo');
    expect(dateQuery({ startDate: '2026-11-28', endDate: '2026-11-28' })).toEqual({
      startDate: '2026-11-27T15:00:00.000Z',
      endDate: '2026-11-28T14:59:59.999Z',
    });
    // In UTC, the UTC days.
    inZone('UTC');
    expect(dateQuery({ startDate: '2026-03-01', endDate: '2026-03-01' })).toEqual({
      startDate: '2026-03-01T00:00:00.000Z',
      endDate: '2026-03-01T23:59:59.999Z',
    });
  });

  it('follows daylight saving time, and leaves out what is unset or beyond the years the service reads', () => {
    inZone('Europe/Berlin');
    // 29 March 2026 has 23 hours in Berlin.
    expect(dateQuery({ startDate: '2026-03-29', endDate: '2026-03-29' })).toEqual({
      startDate: '2026-03-28T23:00:00.000Z',
      endDate: '2026-03-29T21:59:59.999Z',
    });
    expect(dateQuery({ startDate: '', endDate: '' })).toEqual({ startDate: undefined, endDate: undefined });
    // Years 0-99 are not read as 1900-1999.
    expect(dateQuery({ startDate: '0050-01-01', endDate: '' }).startDate).toMatch(/^0049-12-31T2\d:/);
    inZone('America/Los_Angeles');
    expect(dateQuery({ startDate: '', endDate: '9999-12-31' }).endDate).toBeUndefined();
  });

  it('says whether a decision made now can be listed, by local days', () => {
    inZone('America/Los_Angeles');
    // 12:00 UTC on 15 June is 5 AM on 15 June in California; 02:00 UTC on the 16th is still the 15th.
    expect(datesAdmitNow(filters({ startDate: '2030-06-15', endDate: '2030-06-15' }), at)).toBe(true);
    const evening = Date.parse('2030-06-16T02:00:00.000Z');
    expect(datesAdmitNow(filters({ endDate: '2030-06-15' }), evening)).toBe(true);
    expect(datesAdmitNow(filters({ startDate: '2030-06-16' }), evening)).toBe(false);
    expect(mayList(event, filters({ startDate: '2030-06-16' }), evening)).toBe(false);
  });
});

describe('when the list may move', () => {
  it('follows on the first page with nothing open, and nowhere else', () => {
    expect(follows({ offset: 0, open: null })).toBe(true);
    expect(follows({ offset: 50, open: null })).toBe(false);
    expect(follows({ offset: 0, open: 'd1' })).toBe(false);
  });
});

describe('what is said about new decisions', () => {
  it('counts them in words', () => {
    expect(newDecisions(1)).toBe('1 new decision');
    expect(newDecisions(3)).toBe('3 new decisions');
  });

  it('says how many were added and of which tools (revealed, once each), and how many wait', () => {
    expect(arrivalText({ shown: 0, tools: [], waiting: 0 })).toBeNull();
    expect(arrivalText({ shown: 3, tools: ['wire', 'pay', 'wire'], waiting: 0 })).toBe(
      '3 new decisions: wire, pay.',
    );
    expect(arrivalText({ shown: 1, tools: ['wire\u202E'], waiting: 0 })).toBe('1 new decision: wire\\u202E.');
    expect(arrivalText({ shown: 0, tools: [], waiting: 4 })).toBe('4 new decisions not shown yet.');
    const many = Array.from({ length: 20 }, (_, i) => `tool_with_a_long_name_${i}`);
    const text = arrivalText({ shown: 20, tools: many, waiting: 0 })!;
    expect(text.length).toBeLessThan(160);
    expect(text).toMatch(/^20 new decisions: tool_with_a_long_name_0, .*…\.$/);
  });
});
