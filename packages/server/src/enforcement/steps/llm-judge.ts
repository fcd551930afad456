import type { Judge } from '../../modules/llm-judge/model.js';
import { judgeStep } from '../../modules/llm-judge/step.js';
import type { Step } from '../model.js';
import { verdictOf } from './constraints.js';

/**
 * An llm-mode policy is judged by a model (the engine alone denies it): the judge's verdict replaces
 * the engine's. Awaiting the model's HTTP answer is the only wait; every failure denies.
 */
export function llmJudgeStep(judge: Pick<Judge, 'judge'>): Step {
  return {
    name: 'llm-judge',
    async run({ scope, call, policy }, verdict) {
      if (policy?.mode !== 'llm') return { verdict };
      const judged = await judgeStep(judge, scope.organizationId, policy, call);
      return {
        verdict: {
          ...verdictOf(judged.evaluation, policy),
          matchedException: judged.matchedException,
          judge: judged.judge,
        },
      };
    },
  };
}
