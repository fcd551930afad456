import type { Evaluation, FailedConstraint } from '@svc/policy-engine';
import type { LoadedPolicy } from '../policies/cache.js';
import type { Judge, JudgeBinding, ProviderName } from './model.js';
import { argumentAt } from './prompt.js';

/** An llm policy's evaluation plus what only a judged decision has. */
export interface JudgedEvaluation {
  evaluation: Evaluation;
  matchedException: string | null;
  /** What the receipt binds; null when no provider was asked (none configured). */
  judge: Partial<JudgeBinding> | null;
}

/**
 * The judge step of the enforcement path: the loaded llm-mode policy and the call in, a verdict out.
 * Any failure denies, with a reason that says which failure it was.
 */
export async function judgeStep(
  judge: Pick<Judge, 'judge'>,
  organizationId: string,
  policy: LoadedPolicy,
  call: { toolName: string; arguments: Record<string, unknown> },
): Promise<JudgedEvaluation> {
  const config = policy.definition.llmConfig;
  const description = config?.description?.trim() ?? '';
  if (description === '') {
    // A policy stating no rule cannot be judged; asking a model anyway would be a guess.
    return denied('The llm policy has an empty description; denied (fail closed)', 'empty_description', null);
  }
  const verdict = await judge.judge({
    organizationId,
    toolName: call.toolName,
    policyVersion: policy.version,
    policyHash: policy.hash,
    description,
    exceptions: config?.exceptions ?? [],
    argumentInstructions: config?.argumentInstructions ?? [],
    preferredModel: (config?.preferredModel as ProviderName | undefined) ?? null,
    arguments: call.arguments,
  });
  if (!verdict.ok) {
    return denied(
      `LLM judge unavailable, denied (fail closed): ${verdict.message}`,
      verdict.kind,
      verdict.binding,
    );
  }
  const { answer, binding } = verdict;
  if (answer.decision === 'allow') {
    return {
      evaluation: {
        decision: 'allow',
        reason: answer.matchedException
          ? `Allowed by exception "${answer.matchedException}": ${answer.reason}`
          : `Allowed by the LLM judge: ${answer.reason}`,
        failedConstraints: [],
        failedArgument: null,
      },
      matchedException: answer.matchedException,
      judge: binding,
    };
  }
  const failed: FailedConstraint = {
    parameter: answer.failedArgument ?? '',
    constraint_type: 'llm',
    expected: description,
    // Looked up as the judge's answer was checked (argumentAt: top-level key, else dotted path).
    actual:
      answer.failedArgument !== null
        ? (argumentAt(call.arguments, answer.failedArgument)?.value ?? null)
        : null,
    message: answer.failedArgument ? `${answer.failedArgument}: ${answer.reason}` : answer.reason,
  };
  return {
    evaluation: {
      decision: 'deny',
      reason: `Denied by the LLM judge: ${answer.reason}`,
      failedConstraints: [failed],
      failedArgument: answer.failedArgument,
    },
    matchedException: null,
    judge: binding,
  };
}

function denied(reason: string, kind: string, judge: Partial<JudgeBinding> | null): JudgedEvaluation {
  return {
    evaluation: {
      decision: 'deny',
      reason,
      failedConstraints: [
        {
          parameter: '',
          constraint_type: 'llm_unavailable',
          expected: 'a valid answer from the judge',
          actual: kind,
          message: reason,
        },
      ],
      failedArgument: null,
    },
    matchedException: null,
    judge,
  };
}
