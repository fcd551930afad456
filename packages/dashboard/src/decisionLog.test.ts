import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  arrivalText,
  dateQuery,
  datesAdmitNow,
  type Filters,
  filterProblem,
  follows,
  mayList,
  NO_FILTERS,
  newDecisions,
  toolFilterSpaces,
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

/** The day instant `t` falls on in `tz`, `YYYY-MM-DD`, read through Intl (not the code under test). */
const formats = new Map<string, Intl.DateTimeFormat>();
const dayIn = (tz: string, t: number): string => {
  let f = formats.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' });
    formats.set(tz, f);
  }
  return f.format(t);
};
/** The days from `from` to `to` (inclusive), `YYYY-MM-DD`. */
const days = (from: string, to: string): string[] => {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86_400_000)
    out.push(new Date(t).toISOString().slice(0, 10));
  return out;
};
/** A day's edges as dateQuery asks for them, as instants. */
const edges = (day: string) => {
  const q = dateQuery({ startDate: day, endDate: day });
  return { start: Date.parse(q.startDate!), end: Date.parse(q.endDate!) };
};

describe('days the time zone skipped or started after midnight', () => {
  it('refuses a day the zone skipped, in words, and asks for nothing (Samoa skipped 30 December 2011)', () => {
    inZone('Pacific/Apia');
    const day = { startDate: '2011-12-30', endDate: '2011-12-30' };
    expect(filterProblem(day)).toBe(
      '2011-12-30 does not exist in your time zone (Pacific/Apia): its clocks skipped that day, so no decision can match. Choose another day.',
    );
    // The days around it are whole, and meet: the 29th ends where the 31st starts.
    expect(dateQuery({ startDate: '2011-12-29', endDate: '2011-12-29' })).toEqual({
      startDate: '2011-12-29T10:00:00.000Z',
      endDate: '2011-12-30T09:59:59.999Z',
    });
    expect(dateQuery({ startDate: '2011-12-31', endDate: '2011-12-31' })).toEqual({
      startDate: '2011-12-30T10:00:00.000Z',
      endDate: '2011-12-31T09:59:59.999Z',
    });
    // A range that holds other days too is fine: the skipped day adds nothing to it.
    expect(filterProblem({ startDate: '2011-12-29', endDate: '2011-12-30' })).toBeNull();
    expect(filterProblem({ startDate: '2011-12-30', endDate: '2011-12-31' })).toBeNull();
    expect(dateQuery({ startDate: '2011-12-30', endDate: '2011-12-31' })).toEqual({
      startDate: '2011-12-30T10:00:00.000Z',
      endDate: '2011-12-31T09:59:59.999Z',
    });
    // From alone, or To alone, on the skipped day: from the day after, up to the day before.
    expect(dateQuery({ startDate: '2011-12-30', endDate: '' }).startDate).toBe('2011-12-30T10:00:00.000Z');
    expect(dateQuery({ startDate: '', endDate: '2011-12-30' }).endDate).toBe('2011-12-30T09:59:59.999Z');
    // Kwajalein skipped 21 August 1993 the same way.
    inZone('Pacific/Kwajalein');
    expect(filterProblem({ startDate: '1993-08-21', endDate: '1993-08-21' })).toMatch(
      /^1993-08-21 does not exist in your time zone \(Pacific\/Kwajalein\)/,
    );
    // Elsewhere the same day is an ordinary one.
    inZone('Europe/Berlin');
    expect(filterProblem(day)).toBeNull();
  });

  it('starts a day whose midnight the clocks skipped at the first time they show on it', () => {
    // Santiago, Havana and Beirut moved their clocks from 23:59:59 to 01:00 on these days.
    inZone('America/Santiago');
    expect(dateQuery({ startDate: '2022-09-11', endDate: '2022-09-11' })).toEqual({
      startDate: '2022-09-11T04:00:00.000Z',
      endDate: '2022-09-12T02:59:59.999Z',
    });
    // The day before ends just before: nothing falls between the two.
    expect(dateQuery({ startDate: '', endDate: '2022-09-10' }).endDate).toBe('2022-09-11T03:59:59.999Z');
    inZone('America/Havana');
    expect(dateQuery({ startDate: '2020-03-08', endDate: '' }).startDate).toBe('2020-03-08T05:00:00.000Z');
    inZone('Asia/Beirut');
    expect(dateQuery({ startDate: '2020-03-29', endDate: '' }).startDate).toBe('2020-03-28T22:00:00.000Z');
    // São Paulo went back from midnight to 23:00: the 16th had 25 hours, its last one shown twice.
    inZone('America/Sao_Paulo');
    expect(dateQuery({ startDate: '2019-02-16', endDate: '2019-02-16' })).toEqual({
      startDate: '2019-02-16T02:00:00.000Z',
      endDate: '2019-02-17T02:59:59.999Z',
    });
  });

  it('reads only what the clocks show, never where the browser puts a local time that does not exist', () => {
    // Engines have placed a skipped midnight at the time after the gap, or an hour before it: the
    // edges must not depend on which. Setting local times is not allowed here.
    const local = ['setFullYear', 'setMonth', 'setDate', 'setHours', 'setMinutes'] as const;
    const spies = local.map((name) =>
      vi.spyOn(Date.prototype, name).mockImplementation(() => {
        throw new Error(`Date.prototype.${name} was called`);
      }),
    );
    try {
      inZone('America/Santiago');
      expect(dateQuery({ startDate: '2022-09-11', endDate: '2022-09-11' }).startDate).toBe(
        '2022-09-11T04:00:00.000Z',
      );
      inZone('Pacific/Apia');
      expect(filterProblem({ startDate: '2011-12-30', endDate: '2011-12-30' })).not.toBeNull();
      expect(
        datesAdmitNow({ startDate: '2011-12-31', endDate: '' }, Date.parse('2011-12-30T11:00:00Z')),
      ).toBe(true);
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });

  it('gives every day of these zones from its first instant to its last, and no other instant', () => {
    const cases: [string, string, string][] = [
      ['Pacific/Apia', '2011-09-01', '2012-04-30'],
      ['Pacific/Kwajalein', '1993-08-01', '1993-09-10'],
      ['America/Santiago', '2022-03-25', '2022-09-20'],
      ['America/Havana', '2020-03-01', '2020-11-10'],
      ['Asia/Beirut', '2020-03-20', '2020-10-31'],
      ['America/Sao_Paulo', '2018-10-28', '2019-02-24'],
      // Half-hour daylight saving time, and an offset of 5 h 45 min.
      ['Australia/Lord_Howe', '2020-03-30', '2020-10-10'],
      ['Asia/Kathmandu', '1985-12-25', '1986-01-05'],
      ['America/Los_Angeles', '2026-03-01', '2026-11-05'],
      // Daylight time ended at 00:01, back to 23:01: the clocks passed midnight, then showed the day
      // before again for 59 minutes.
      ['America/Moncton', '2006-10-25', '2006-11-01'],
      ['America/St_Johns', '1987-10-22', '1987-10-28'],
    ];
    for (const [tz, from, to] of cases) {
      inZone(tz);
      for (const day of days(from, to)) {
        const { start, end } = edges(day);
        // Does the zone show this day at all? Read every 15 minutes around it.
        const noon = Date.parse(`${day}T12:00:00Z`);
        let shown = false;
        for (let t = noon - 40 * 3_600_000; t <= noon + 40 * 3_600_000 && !shown; t += 900_000)
          shown = dayIn(tz, t) === day;
        if (!shown) {
          expect(start, `${tz} ${day}`).toBeGreaterThan(end);
          expect(filterProblem({ startDate: day, endDate: day }), `${tz} ${day}`).not.toBeNull();
          continue;
        }
        const at = `${tz} ${day}`;
        expect(
          [dayIn(tz, start - 1) < day, dayIn(tz, start), dayIn(tz, end), dayIn(tz, end + 1) > day],
          at,
        ).toEqual([true, day, day, true]);
        // Nowhere outside the edges do the clocks show the day (read every 15 minutes).
        for (let t = noon - 40 * 3_600_000; t <= noon + 40 * 3_600_000; t += 900_000)
          if (t < start || t > end)
            expect(dayIn(tz, t), `${at} at ${new Date(t).toISOString()}`).not.toBe(day);
        expect(filterProblem({ startDate: day, endDate: day }), at).toBeNull();
      }
    }
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

describe('a tool filter with spaces at an end', () => {
  it('is kept as typed (tool names may have them), and said, with the name without them offered', () => {
    expect(toolFilterSpaces('transfer_funds')).toBeNull();
    expect(toolFilterSpaces('send money')).toBeNull();
    expect(toolFilterSpaces('')).toBeNull();
    expect(toolFilterSpaces('  transfer_funds  ')).toEqual({
      trimmed: 'transfer_funds',
      said: 'The tool filter has 2 spaces before the name and 2 spaces after it: tool names are matched exactly, spaces included (a tool may have them in its name), so only decisions of a tool named with them are listed.',
    });
    expect(toolFilterSpaces(' pay')?.said).toMatch(/^The tool filter has 1 space before the name: /);
    expect(toolFilterSpaces('pay\u00a0\u00a0\u00a0')?.said).toMatch(
      /^The tool filter has 3 spaces after the name: /,
    );
    expect(toolFilterSpaces('send money ')?.trimmed).toBe('send money');
    expect(toolFilterSpaces('   ')).toEqual({
      trimmed: '',
      said: 'The tool filter is only spaces (3): tool names are matched exactly, spaces included (a tool may have them in its name), so only decisions of a tool named with those spaces are listed.',
    });
  });
});
