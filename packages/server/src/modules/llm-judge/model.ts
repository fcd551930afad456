import type { ZodType } from 'zod';

/** The model providers a policy's `llmConfig.preferredModel` can name. */
export const PROVIDERS = ['openai', 'anthropic', 'google'] as const;
export type ProviderName = (typeof PROVIDERS)[number];

/** Operator configuration of one provider (SVC_LLM_<PROVIDER>_API_KEY, _BASE_URL, _MODEL). */
export interface ProviderSettings {
  apiKey: string | null;
  baseUrl: string | null;
  model: string;
}

export interface LlmSettings {
  providers: Record<ProviderName, ProviderSettings | null>;
  /** SVC_LLM_DEFAULT_PROVIDER, else the first configured of openai, anthropic, google; null when none. */
  defaultProvider: ProviderName | null;
  /** SVC_LLM_TIMEOUT_MS: one judgement, queueing included. */
  timeoutMs: number;
  /** SVC_LLM_MAX_CONCURRENCY: requests in flight per provider. */
  maxConcurrency: number;
  /** SVC_LLM_CACHE_TTL_MS and SVC_LLM_CACHE_SIZE: the verdict cache. */
  cacheTtlMs: number;
  cacheSize: number;
}

/** What the model must answer, validated before it is believed. */
export interface JudgeAnswer {
  decision: 'allow' | 'deny';
  reason: string;
  failedArgument: string | null;
  matchedException: string | null;
}

/** Which model judged and what exactly was exchanged; bound into the decision's receipt. */
export interface JudgeBinding {
  provider: ProviderName;
  model: string;
  /** sha256:<hex> of the canonical JSON of {system, prompt} sent. */
  promptHash: string;
  /**
   * sha256:<hex> of the raw answer text received: the model's text as sent (OpenAI, Gemini, Anthropic
   * native output), or the JSON text of Anthropic's json tool input exactly as it appeared in the body.
   */
  answerHash: string;
}

/** Why a judgement did not produce a believable answer; every kind denies. */
export type JudgeFailureKind =
  | 'not_configured'
  | 'timeout'
  | 'rate_limited'
  | 'provider_error'
  | 'invalid_output'
  | 'overloaded';

/** The outcome of judging one call: an answer to believe, or a failure that denies. */
export type Verdict =
  | { ok: true; answer: JudgeAnswer; binding: JudgeBinding; cached: boolean }
  | { ok: false; kind: JudgeFailureKind; message: string; binding: Partial<JudgeBinding> | null };

/** The policy text the judge applies (operator-written, trusted) and the call it judges (untrusted). */
export interface JudgeRequest {
  organizationId: string;
  toolName: string;
  policyVersion: number;
  /** sha256 of the policy definition: any change of the policy misses the cache. */
  policyHash: string;
  description: string;
  exceptions: readonly string[];
  argumentInstructions: readonly { argumentName: string; instruction: string }[];
  preferredModel: ProviderName | null;
  arguments: Record<string, unknown>;
}

/**
 * What one structured call brought back: `text` is the raw answer text (the model's answer as it
 * appeared on the wire, see providers/raw.ts), `object` what the SDK parsed from it, and `body` the
 * provider's whole answer body exactly as received, where duplicate members are still visible.
 */
export interface ProviderAnswer {
  text: string;
  object: unknown;
  body: string;
}

/** One provider's model call: a prompt in, the raw answer text and the parsed object out. */
export interface ProviderAdapter {
  readonly provider: ProviderName;
  readonly model: string;
  /** The judge's call: the answer schema. */
  complete(input: { system: string; prompt: string; signal: AbortSignal }): Promise<ProviderAnswer>;
  /** Any other structured call (the policy assistant), with the caller's zod schema. */
  generate(input: {
    system: string;
    prompt: string;
    signal: AbortSignal;
    schema: ZodType;
  }): Promise<ProviderAnswer>;
}

/**
 * The result of a structured call for the policy assistant. `busy`: the model was not asked, the
 * organization already has as many calls in flight as it may.
 */
export type Assisted =
  | { ok: true; object: unknown; provider: ProviderName; model: string }
  | { ok: false; message: string; busy?: true };

/** Judges calls under llm-mode policies. */
export interface Judge {
  judge(request: JudgeRequest): Promise<Verdict>;
  /** Which provider would judge a policy preferring `preferred`, and whether it is configured. */
  route(preferred: ProviderName | null): {
    provider: ProviderName | null;
    model: string | null;
    configured: boolean;
  };
}
