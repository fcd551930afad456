import { describe, expect, it } from 'vitest';
import { dateParam, intParam, parseListQuery } from './query.js';

describe('dateParam', () => {
  it.each([
    ['2026-11-21', 'start', '2026-11-21T00:00:00.000Z'],
    ['2026-11-21', 'end', '2026-11-22T00:00:00.000Z'],
    ['2028-02-29', 'end', '2028-03-01T00:00:00.000Z'],
    ['2026-12-31', 'end', '2027-01-01T00:00:00.000Z'],
    ['2026-11-21T10:00:00Z', 'start', '2026-11-21T10:00:00.000Z'],
    ['2026-11-21T10:00:00Z', 'end', '2026-11-21T10:00:00.001Z'],
    ['2026-11-21T10:00Z', 'start', '2026-11-21T10:00:00.000Z'],
    ['2026-11-21T10:00:00.1234Z', 'start', '2026-11-21T10:00:00.123Z'],
    ['2026-11-21T10:00:00', 'start', '2026-11-21T10:00:00.000Z'],
    ['2026-11-21T01:30:00+02:00', 'start', '2026-11-20T23:30:00.000Z'],
    ['2026-11-21T23:30:00-0130', 'start', '2026-11-22T01:00:00.000Z'],
    ['0050-01-01', 'start', '0050-01-01T00:00:00.000Z'],
    ['0000-01-01', 'start', '0000-01-01T00:00:00.000Z'],
    ['9999-12-30', 'end', '9999-12-31T00:00:00.000Z'],
    // The end of time as strings hold it is no bound: every decision is before it.
    ['9999-12-31', 'end', undefined],
    ['9999-12-31T23:59:59.999Z', 'end', undefined],
    ['9999-12-31T23:59:59.998Z', 'end', '9999-12-31T23:59:59.999Z'],
  ] as const)('%s as %s bound is %s', (raw, edge, expected) => {
    expect(dateParam('d', raw, edge)).toBe(expected);
  });

  it.each([
    'today',
    '2026-13-01',
    '2026-02-29',
    '2026-11-31',
    '2026-11-21T24:00:00Z',
    '2026-11-21T10:60:00Z',
    '2026-11-21T10:00:00+25:00',
    '2026-11-21T10:00:00 UTC',
    '21/11/2026',
    '',
  ])('rejects %j naming the parameter', (raw) => {
    expect(() => dateParam('startDate', raw, 'start')).toThrow(/querystring\/startDate/);
  });

  it('refuses instants outside the years 0000-9999', () => {
    expect(() => dateParam('startDate', '9999-12-31T23:30:00-01:00', 'start')).toThrow(/outside the years/);
    expect(() => dateParam('startDate', '0000-01-01T00:30:00+01:00', 'start')).toThrow(/outside the years/);
    expect(() => dateParam('endDate', '0000-01-01T00:30:00+01:00', 'end')).toThrow(/outside the years/);
  });

  it('passes absence through', () => {
    expect(dateParam('d', undefined, 'start')).toBeUndefined();
  });
});

describe('intParam', () => {
  it('parses in bounds, defaults when absent, rejects the rest', () => {
    expect(intParam('limit', undefined, 1, 100, 50)).toBe(50);
    expect(intParam('limit', '007', 1, 100, 50)).toBe(7);
    expect(intParam('after', undefined, 0, 10)).toBeUndefined();
    for (const raw of ['0', '101', '-1', '1e2', ' 5', '0x10', '']) {
      expect(() => intParam('limit', raw, 1, 100, 50)).toThrow(
        'querystring/limit must be an integer from 1 to 100',
      );
    }
  });
});

describe('parseListQuery', () => {
  it('builds a filter with a half-open date range', () => {
    expect(parseListQuery({ startDate: '2026-11-20', endDate: '2026-11-20', decision: 'deny' })).toEqual({
      limit: 50,
      offset: 0,
      filter: { decision: 'deny', from: '2026-11-20T00:00:00.000Z', before: '2026-11-21T00:00:00.000Z' },
    });
  });

  it('refuses an inverted range and unknown decisions', () => {
    expect(() =>
      parseListQuery({ startDate: '2026-11-20T00:00:01Z', endDate: '2026-11-20T00:00:00Z' }),
    ).toThrow(/startDate/);
    expect(() => parseListQuery({ decision: 'escalate' })).toThrow(/querystring\/decision must be one of/);
  });
});
