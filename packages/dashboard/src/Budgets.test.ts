import { describe, expect, it } from 'vitest';
import { durationText } from './Budgets.js';

describe('how long a spend approval waits', () => {
  it('says the window exactly, not rounded to minutes', () => {
    // The service takes 60 to 86,400 seconds; 90 s used to read "2 min".
    expect(durationText(90)).toBe('1 min 30 s');
    expect(durationText(60)).toBe('1 min');
    expect(durationText(100)).toBe('1 min 40 s');
    expect(durationText(900)).toBe('15 min');
    expect(durationText(3600)).toBe('1 h');
    expect(durationText(5430)).toBe('1 h 30 min 30 s');
    expect(durationText(86_400)).toBe('24 h');
    expect(durationText(45)).toBe('45 s');
    expect(durationText(0)).toBe('0 s');
  });
});
