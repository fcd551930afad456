import { show } from './format.js';
import type { Decision, Evaluation, FailedConstraint } from './types.js';

export function failure(
  parameter: string,
  constraintType: string,
  expected: unknown,
  actual: unknown,
  text: string,
): FailedConstraint {
  return {
    parameter,
    constraint_type: constraintType,
    expected,
    actual,
    message: parameter ? `${parameter}: ${text}` : text,
  };
}

const TYPE_ARTICLE: Record<string, string> = { number: 'a number', string: 'a string', array: 'an array' };

export function typeFailure(parameter: string, expected: string, actualType: string): FailedConstraint {
  return failure(
    parameter,
    'type',
    expected,
    actualType,
    `must be ${TYPE_ARTICLE[expected] ?? expected} (got ${actualType})`,
  );
}

export function unevaluable(parameter: string, error: unknown): FailedConstraint {
  const detail = error instanceof Error ? error.message : show(error);
  return failure(
    parameter,
    'unevaluable',
    'an evaluable value',
    detail,
    `could not be evaluated (${detail}), so the call is denied`,
  );
}

const NO_FAILURES = Object.freeze([]) as unknown as FailedConstraint[];

/** Shared by every passing call: the success path allocates nothing. */
export const ALLOW: Evaluation = Object.freeze({
  decision: 'allow',
  reason: null,
  failedConstraints: NO_FAILURES,
  failedArgument: null,
});

export function buildEvaluation(decision: Decision, failures: FailedConstraint[]): Evaluation {
  if (failures.length === 0) return ALLOW;
  let reason = '';
  for (let i = 0; i < failures.length; i++) reason += (i ? '; ' : '') + failures[i]!.message;
  return {
    decision,
    reason,
    failedConstraints: failures,
    failedArgument: failures[0]!.parameter || null,
  };
}
