import { describe, expect, it } from 'vitest';
import {
  arrivalText,
  datesAdmitNow,
  type Filters,
  follows,
  mayList,
  NO_FILTERS,
  newDecisions,
} from './decisionLog.js';

const at = Date.parse('2030-06-15T12:00:00.000Z');
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

  it('lists none while the dates end before today or start after it (whole UTC days)', () => {
    expect(datesAdmitNow(filters({ startDate: '2030-06-15', endDate: '2030-06-15' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ startDate: '2030-01-01' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-12-31' }), at)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-06-14' }), at)).toBe(false);
    expect(datesAdmitNow(filters({ startDate: '2030-06-16' }), at)).toBe(false);
    expect(mayList(event, filters({ endDate: '2030-06-14' }), at)).toBe(false);
  });

  it('gives a clock a few minutes off the benefit of the doubt around midnight UTC', () => {
    const justAfter = Date.parse('2030-06-16T00:02:00.000Z');
    const justBefore = Date.parse('2030-06-15T23:58:00.000Z');
    expect(datesAdmitNow(filters({ endDate: '2030-06-15' }), justAfter)).toBe(true);
    expect(datesAdmitNow(filters({ startDate: '2030-06-16' }), justBefore)).toBe(true);
    expect(datesAdmitNow(filters({ endDate: '2030-06-15' }), Date.parse('2030-06-16T00:10:00.000Z'))).toBe(
      false,
    );
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
