/** JSON types a tool argument can declare. */
export type ArgType = 'string' | 'number' | 'boolean' | 'array' | 'object';

/** What a violated constraint leads to. */
export type ConstraintAction = 'deny' | 'require_approval';

/** One constraint on one argument. Every field except argumentName is optional. */
export interface Constraint {
  argumentName: string;
  /** false = the constraint is skipped (still validated on write). */
  enabled?: boolean;
  required?: boolean;
  notNull?: boolean;
  minimum?: number;
  maximum?: number;
  greaterThan?: number;
  lessThan?: number;
  /** Alias of minimum. */
  greaterThanOrEqual?: number;
  /** Alias of maximum. */
  lessThanOrEqual?: number;
  minLength?: number;
  maxLength?: number;
  enum?: string[];
  notEnum?: string[];
  regex?: string;
  notRegex?: string;
  minItems?: number;
  maxItems?: number;
  /** Default deny. */
  action?: ConstraintAction;
}

export interface CumulativeLimit {
  argumentName: string;
  maxValue: number;
}

export interface SessionConstraints {
  maxCalls?: number;
  cumulativeLimits?: CumulativeLimit[];
}

export interface ArgumentInstruction {
  argumentName: string;
  instruction: string;
}

export interface LlmConfig {
  description: string;
  exceptions?: string[];
  argumentInstructions?: ArgumentInstruction[];
  preferredModel?: 'openai' | 'anthropic' | 'google';
}

export type PolicyMode = 'deterministic' | 'llm';

export interface PolicyDefinition {
  mode: PolicyMode;
  constraints?: Constraint[];
  sessionConstraints?: SessionConstraints | null;
  llmConfig?: LlmConfig | null;
}

/** A tool argument as declared at registration. */
export interface ToolArgument {
  name: string;
  type: ArgType;
  description?: string;
  required?: boolean;
  enum?: string[];
  minimum?: number;
  maximum?: number;
  pattern?: string;
}

export interface FailedConstraint {
  /** Argument name, or '' for failures that concern the whole call (mode, max_calls). */
  parameter: string;
  constraint_type: string;
  expected: unknown;
  actual: unknown;
  /** One sentence, prefixed with the parameter when there is one. */
  message: string;
}

export type Decision = 'allow' | 'deny' | 'require_approval';

/**
 * The allow result (and the llm deny result) is one frozen object shared by every call, so the success
 * path allocates nothing: copy before mutating.
 */
export interface Evaluation {
  decision: Decision;
  reason: string | null;
  failedConstraints: FailedConstraint[];
  failedArgument: string | null;
}

/** Usage of a session BEFORE the call being evaluated. */
export interface SessionState {
  calls: number;
  cumulative: Record<string, number>;
}

export interface SessionIncrements {
  calls: number;
  cumulative: Record<string, number>;
}
