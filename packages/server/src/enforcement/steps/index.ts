import type { ApprovalService } from '../../modules/approvals/service.js';
import type { Judge } from '../../modules/llm-judge/model.js';
import type { Step } from '../model.js';
import type { SessionCounters } from '../session-counters.js';
import { approvalsStep } from './approvals.js';
import { constraintsStep } from './constraints.js';
import { llmJudgeStep } from './llm-judge.js';
import { sessionLimitsStep } from './session-limits.js';

export interface StepDeps {
  approvals: Pick<ApprovalService, 'use' | 'open'>;
  sessions: SessionCounters;
  judge: Pick<Judge, 'judge'>;
}

/**
 * The checks of every enforced call, in order: the policy's constraints (or, for an llm policy, the
 * model's judgement), then human approval (which
 * may turn require_approval into allow), then session limits (which count only allowed calls).
 * A new kind of check is one more entry here.
 */
export function enforcementSteps({ approvals, sessions, judge }: StepDeps): Step[] {
  return [constraintsStep, llmJudgeStep(judge), approvalsStep(approvals), sessionLimitsStep(sessions)];
}
