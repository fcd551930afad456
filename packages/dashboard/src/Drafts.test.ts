import { describe, expect, it } from 'vitest';
import { approvalOutcome, replaySummary } from './Drafts.js';

describe('what approving a draft did', () => {
  it('names the policies changed', () => {
    expect(approvalOutcome({ applied: [{ toolName: 'pay', version: 2 }], skipped: [] })).toEqual({
      text: 'Applied: pay version 2.',
      applied: true,
    });
  });

  it('says which rules were not applied, and why', () => {
    const skipped = [
      { ruleId: 'nosearch', reason: 'action "deny" cannot become constraints' },
      { ruleId: 'cap', toolName: 'ask', reason: 'the policy of ask is in llm mode' },
    ];
    expect(approvalOutcome({ applied: [{ toolName: 'pay', version: 3 }], skipped })).toEqual({
      text: 'Applied: pay version 3. Not applied: rule nosearch: action "deny" cannot become constraints; rule cap for ask: the policy of ask is in llm mode.',
      applied: true,
    });
  });

  it('does not read as a success when nothing was applied (it used to say "Applied: nothing")', () => {
    const outcome = approvalOutcome({
      applied: [],
      skipped: [{ ruleId: 'nosearch', reason: 'action "deny" cannot become constraints' }],
    });
    expect(outcome.applied).toBe(false);
    expect(outcome.text).toBe(
      'Approved, but nothing was applied: no policy changed. Not applied: rule nosearch: action "deny" cannot become constraints.',
    );
    expect(approvalOutcome({ applied: [] }).text).toBe(
      'Approved, but nothing was applied: no policy changed.',
    );
  });

  it('reveals what agents wrote', () => {
    expect(
      approvalOutcome({
        applied: [{ toolName: 'pay\u202E', version: 1 }],
        skipped: [{ ruleId: 'r\u200B', reason: 'x' }],
      }).text,
    ).toBe('Applied: pay\\u202E version 1. Not applied: rule r\\u200B: x.');
  });
});

describe('the first line of a replay', () => {
  it('says so when there was nothing to replay, rather than that no decision was recorded', () => {
    expect(replaySummary({ tools: [], examined: 0, changed: [] })).toBe(
      'Nothing to replay: no rule of this draft can be applied.',
    );
    expect(replaySummary({ tools: ['pay'], examined: 0, changed: [] })).toBe('No recorded decision for pay.');
    expect(replaySummary({ tools: ['pay', 'wire'], examined: 3, changed: [] })).toBe(
      'Of the last 3 decisions for pay, wire, 0 would have ended differently.',
    );
  });
});
