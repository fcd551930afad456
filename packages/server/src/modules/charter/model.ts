import type { Constraint, PolicyDefinition, QualityReport, ToolArgument } from '@svc/policy-engine';

/** A registered tool as Charter reasons about it. */
export interface ToolInfo {
  name: string;
  description: string | null;
  arguments: ToolArgument[];
}

/** One sentence part Charter turned into a rule. */
export interface CompiledRule {
  toolName: string;
  /** The words it came from. */
  text: string;
  /** What it means, in words. */
  summary: string;
  constraint?: Constraint;
  maxCalls?: number;
  cumulative?: { argumentName: string; maxValue: number };
  /** Values the rule lets through and stops, to build example calls. */
  samples?: { argumentName: string; allowed?: unknown; denied?: unknown };
}

export interface NotUnderstood {
  text: string;
  why: string;
}

export interface CompileResult {
  rules: CompiledRule[];
  notUnderstood: NotUnderstood[];
}

export type FindingKind =
  | 'unknown_argument'
  | 'never_matches'
  | 'blocks_everything'
  | 'allows_everything'
  | 'replaces_llm_policy';

export interface Finding {
  kind: FindingKind;
  message: string;
}

export interface ExampleCall {
  arguments: Record<string, unknown>;
  decision: 'allow' | 'deny' | 'require_approval';
  reason: string;
}

export interface Analysis {
  findings: Finding[];
  examples: ExampleCall[];
}

/** The policy a change is proposed over, as the reviewer is shown it. */
export interface CurrentPolicy {
  version: number;
  /**
   * Whether it was enforced when proposed: approval applies only over the same state. Absent on
   * proposals made before it was recorded, which showed no state: read as active.
   */
  isActive?: boolean;
  definition: PolicyDefinition;
}

/** One tool's proposed policy change, side by side with what is live. */
export interface PolicyChange {
  toolName: string;
  current: CurrentPolicy | null;
  proposed: PolicyDefinition;
  rules: string[];
  quality: QualityReport;
  analysis: Analysis;
}

/** Tool definitions waiting to be registered. */
export interface ToolRegistration {
  name: string;
  description?: string;
  arguments: ToolArgument[];
}

export type VerificationKind = 'policy_change' | 'tool_registration';
export type VerificationStatus = 'pending' | 'approved' | 'rejected';

/** A change waiting for a person: nothing in it is live until approved. */
export interface Verification {
  id: string;
  kind: VerificationKind;
  status: VerificationStatus;
  conversationId: string | null;
  summary: string;
  changes: PolicyChange[];
  tools: ToolRegistration[];
  createdAt: string;
  resolvedAt: string | null;
  resolvedBy: string | null;
  /** Versions written on approval. */
  applied: { toolName: string; version: number }[] | null;
}

export type CharterMode = 'auto' | 'chat' | 'compile';

export interface TurnInput {
  message: string;
  mode: CharterMode;
  surface: string;
  conversationId?: string | undefined;
}

export type VerificationRef =
  | { required: true; id: string; status: VerificationStatus; linkUrl: string }
  | { required: false };

export interface TurnResult {
  conversationId: string;
  mode: 'chat' | 'compile';
  reply: string;
  understood: string[];
  notUnderstood: NotUnderstood[];
  changes: PolicyChange[];
  /** chat: calls the engine was asked about, with its answer. */
  dryRuns: { toolName: string; arguments: Record<string, unknown>; decision: string; reason: string }[];
  verification: VerificationRef;
}

/** What a turn reports while it works (the stream's progress events). */
export type Progress = (stage: string, detail: string) => void;
