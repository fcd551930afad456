import { describe, expect, it } from 'vitest';
import { replayLimit } from './Drafts.js';
import { filterProblem } from './decisionLog.js';

describe('the replay count box', () => {
  it('takes what is typed, empty included, and reads a whole number from 1 to 1000', () => {
    // Cleared, then 50 typed: 50 (the box used to put 1 back when emptied, giving 150).
    expect(replayLimit('')).toBeNull();
    expect(replayLimit('50')).toBe(50);
    expect(replayLimit('1000')).toBe(1000);
    for (const bad of ['0', '1001', '-5', '2.5', 'abc', '1e3']) expect(replayLimit(bad)).toBeNull();
  });
});

describe('the decision filters', () => {
  it('refuses a date range that ends before it starts', () => {
    expect(filterProblem({ startDate: '2026-12-31', endDate: '2026-01-01' })).toMatch(/From is after To/);
    expect(filterProblem({ startDate: '2026-01-01', endDate: '2026-01-01' })).toBeNull();
    expect(filterProblem({ startDate: '2026-01-01', endDate: '' })).toBeNull();
    expect(filterProblem({ startDate: '', endDate: '2026-01-01' })).toBeNull();
  });
});
