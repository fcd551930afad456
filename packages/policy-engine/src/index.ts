export {
  AUTHORIZATION_REASON_CODES,
  type AuthorizationInput,
  type AuthorizationOutcome,
  type AuthorizationReasonCode,
  BUDGET_SCOPES,
  BUDGET_WINDOWS,
  type BudgetScope,
  type BudgetWindow,
  type CategoryPolicy,
  combineConfigs,
  decideAuthorization,
  type EconomicConfig,
  figuresOf,
  formatUsd,
  limitOf,
  MAX_USD,
  MICROS_PER_USD,
  type ScopeFigures,
  type ScopeUsage,
  toMicros,
  toUsd,
  windowStart,
} from './budget.js';
export {
  type CompiledPolicy,
  compilePolicy,
  evaluate,
  LLM_UNAVAILABLE,
  PolicyDefinitionError,
} from './compile.js';
export { CONSTRAINT_TYPES, type ConstraintType } from './constraint-types.js';
export { CONSTRAINT_FIELDS, checkPolicyDefinition } from './definition-check.js';
export { describeConstraint, describePolicy } from './describe.js';
export {
  type CompiledDraft,
  compileDraftRules,
  DRAFT_OPERATORS,
  type DraftCondition,
  type DraftOperator,
  type DraftPolicy,
  type DraftRule,
  PATTERN_OPERATORS,
  type SkippedRule,
} from './drafts.js';
export {
  bodyJsonProblem,
  jsonDataSize,
  MAX_BODY_BYTES,
  MAX_BODY_DEPTH,
  MAX_JSON_DEPTH,
  nestedDeeperThan,
  storable,
  utf8Length,
  wellFormed,
} from './json-limits.js';
export { codePointLength, MAX_REGEX_LENGTH } from './limits.js';
export { APPROVALS_NEED_TEAM, approvalsAllowed, deniedWithoutApprovals } from './plans.js';
export { INVALID_SCORE_CAP, PENALTY, type QualityReport, scorePolicy } from './quality.js';
export { compileRegex, type RegexCompileResult, type RegexMatcher } from './regex.js';
export { evaluateSession, mergeEvaluation, sessionIncrements } from './session.js';
export { type StarterPolicy, starterPolicy } from './starter.js';
export type {
  ArgType,
  ArgumentInstruction,
  Constraint,
  ConstraintAction,
  CumulativeLimit,
  Decision,
  Evaluation,
  FailedConstraint,
  LlmConfig,
  PolicyDefinition,
  PolicyMode,
  SessionConstraints,
  SessionIncrements,
  SessionState,
  ToolArgument,
} from './types.js';
