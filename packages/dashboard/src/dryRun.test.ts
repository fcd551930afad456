import { describe, expect, it } from 'vitest';
import { serviceAnswer } from './dryRun.js';

const approval = { decision: 'require_approval' as const, reason: 'amount above 100' };
const deny = { decision: 'deny' as const, reason: 'to is not allowed' };

describe('what the service would answer a call tried in the editor', () => {
  it('denies a call requiring approval on the free plan, and says why', () => {
    const answer = serviceAnswer(approval, { toolName: 'pay', isActive: true, tier: 'free' });
    expect(answer.decision).toBe('deny');
    expect(answer.reason).toBe(
      'amount above 100: human approval is required, but human-in-the-loop approvals need the Team plan or above; denied',
    );
    expect(answer.note).toMatch(/plan is free.*Team plan or above/);
    expect(answer.whenActive).toBeNull();
  });

  it('keeps require_approval on Team and above', () => {
    for (const tier of ['team', 'business', 'enterprise']) {
      expect(serviceAnswer(approval, { toolName: 'pay', isActive: true, tier })).toEqual({
        ...approval,
        note: null,
        whenActive: null,
      });
    }
  });

  it('says beside require_approval that plans below Team deny, when the plan is not known', () => {
    const answer = serviceAnswer(approval, { toolName: 'pay', isActive: true, tier: undefined });
    expect(answer.decision).toBe('require_approval');
    expect(answer.note).toBe(
      'On plans below Team the service denies this call instead: human-in-the-loop approvals need the Team plan or above.',
    );
  });

  it('allows every call to an inactive policy, and gives the constraints’ verdict as when active', () => {
    const answer = serviceAnswer(deny, { toolName: 'pay', isActive: false, tier: 'team' });
    expect(answer).toEqual({
      decision: 'allow',
      reason: 'Policy for tool "pay" is inactive; allowed without checks',
      note: expect.stringMatching(/^The policy is inactive: the service allows every call/),
      whenActive: deny,
    });
    expect(serviceAnswer(approval, { toolName: 'pay', isActive: false, tier: 'free' }).whenActive).toEqual({
      decision: 'deny',
      reason: expect.stringMatching(/Team plan or above; denied$/),
    });
  });
});
