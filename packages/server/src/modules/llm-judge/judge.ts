import { APICallError } from 'ai';
import type { ZodType } from 'zod';
import { hashJson, sha256Tagged } from '../../ledger/canonical.js';
import { VerdictCache } from './cache.js';
import { ConcurrencyLimiter, QueueFullError } from './limiter.js';
import type {
  Assisted,
  Judge,
  JudgeAnswer,
  JudgeBinding,
  JudgeFailureKind,
  JudgeRequest,
  LlmSettings,
  ProviderAdapter,
  ProviderName,
  ProviderSettings,
  Verdict,
} from './model.js';
import { ANSWER_SCHEMA, answerProblem, buildPrompt, duplicateMember } from './prompt.js';
import { anthropicAdapter } from './providers/anthropic.js';
import { googleAdapter } from './providers/google.js';
import { openaiAdapter } from './providers/openai.js';
import { MalformedAnswerError, RefusedAnswerError } from './providers/structured.js';

const ADAPTERS: Record<ProviderName, (s: ProviderSettings) => ProviderAdapter> = {
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  google: googleAdapter,
};

/** Waiting calls allowed per provider, per slot: beyond that a call is refused at once, not queued. */
const QUEUE_PER_SLOT = 16;

/**
 * The policy assistant's calls have slots of their own per provider, beside the judge's: a quarter
 * of SVC_LLM_MAX_CONCURRENCY, at least one, with QUEUE_PER_SLOT waiting per slot. A judgement never
 * waits behind one of them.
 */
export function assistConcurrency(maxConcurrency: number): number {
  return Math.max(1, Math.floor(maxConcurrency / 4));
}

/** The policy assistant's calls one organization may have waiting or running at once, per instance. */
export const ASSIST_PER_ORGANIZATION = 2;

export interface JudgeDeps {
  settings: LlmSettings;
  now?: () => number;
}

type Failure = Extract<Verdict, { ok: false }>;

function failure(kind: JudgeFailureKind, message: string, binding: Partial<JudgeBinding> | null): Failure {
  return { ok: false, kind, message, binding };
}

/** Names what went wrong in words a person reading the decision understands. */
function classify(
  err: unknown,
  signal: AbortSignal,
  timeoutMs: number,
): { kind: JudgeFailureKind; message: string } {
  if (signal.aborted) return { kind: 'timeout', message: `the model did not answer within ${timeoutMs} ms` };
  if (err instanceof QueueFullError) {
    return { kind: 'overloaded', message: 'too many judgements are waiting for this provider' };
  }
  if (err instanceof RefusedAnswerError) {
    return {
      kind: 'invalid_output',
      message: 'the model refused, or the provider withheld or filtered the answer',
    };
  }
  if (err instanceof MalformedAnswerError) {
    return { kind: 'invalid_output', message: 'the answer is not the required JSON object' };
  }
  if (APICallError.isInstance(err)) {
    if (err.statusCode === 429)
      return { kind: 'rate_limited', message: 'the provider rate-limited the request (HTTP 429)' };
    const status = err.statusCode ? `HTTP ${err.statusCode}` : 'no HTTP answer';
    return { kind: 'provider_error', message: `the provider failed (${status})` };
  }
  return {
    kind: 'provider_error',
    message: `the provider call failed (${err instanceof Error ? err.name : 'error'})`,
  };
}

/**
 * The judge: routes a policy to a configured provider, asks it through the provider's adapter with a
 * deadline and bounded concurrency, validates the answer, and caches believable verdicts. Every
 * failure comes back as a Verdict with ok: false, never as a throw, so callers cannot allow by accident.
 */
export function createJudge({ settings, now = Date.now }: JudgeDeps): Judge & {
  forget: VerdictCache['forget'];
  /**
   * A structured call on the default provider for the policy assistant, on behalf of an
   * organization: on slots of its own, never the judge's, and at most ASSIST_PER_ORGANIZATION at once
   * per organization (beyond that it is refused with `busy`, the model not asked).
   */
  assist: (schema: ZodType, system: string, prompt: string, organizationId: string) => Promise<Assisted>;
} {
  const adapters = new Map<ProviderName, ProviderAdapter>();
  const limiters = new Map<ProviderName, ConcurrencyLimiter>();
  const assistLimiters = new Map<ProviderName, ConcurrencyLimiter>();
  const assistSlots = assistConcurrency(settings.maxConcurrency);
  for (const [name, s] of Object.entries(settings.providers) as [ProviderName, ProviderSettings | null][]) {
    if (!s) continue;
    adapters.set(name, ADAPTERS[name](s));
    limiters.set(
      name,
      new ConcurrencyLimiter(settings.maxConcurrency, settings.maxConcurrency * QUEUE_PER_SLOT),
    );
    assistLimiters.set(name, new ConcurrencyLimiter(assistSlots, assistSlots * QUEUE_PER_SLOT));
  }
  /** The policy assistant's calls waiting or running, per organization. */
  const assisting = new Map<string, number>();
  const cache = new VerdictCache(settings.cacheTtlMs, settings.cacheSize, now);
  const inFlight = new Map<string, Promise<Verdict>>();

  function route(preferred: ProviderName | null) {
    const provider = preferred && settings.providers[preferred] ? preferred : settings.defaultProvider;
    const s = provider ? settings.providers[provider] : null;
    return { provider, model: s?.model ?? null, configured: !!s };
  }

  async function ask(adapter: ProviderAdapter, req: JudgeRequest, key: string): Promise<Verdict> {
    const prompt = buildPrompt(req);
    const base = { provider: adapter.provider, model: adapter.model, promptHash: prompt.hash };
    const signal = AbortSignal.timeout(settings.timeoutMs);
    let text: string;
    let object: unknown;
    let body: string;
    try {
      ({ text, object, body } = await limiters
        .get(adapter.provider)!
        .run(signal, () => adapter.complete({ system: prompt.system, prompt: prompt.prompt, signal })));
    } catch (err) {
      const { kind, message } = classify(err, signal, settings.timeoutMs);
      const answered = err instanceof MalformedAnswerError && err.text !== null;
      return failure(kind, message, answered ? { ...base, answerHash: sha256Tagged(err.text!) } : base);
    }
    const binding: JudgeBinding = { ...base, answerHash: sha256Tagged(text) };
    // The SDK validated the object already; parsing again keeps this module's type honest.
    const parsed = ANSWER_SCHEMA.safeParse(object);
    if (!parsed.success) return failure('invalid_output', 'the answer does not match the schema', binding);
    // The SDK parsed the body with JSON.parse, which keeps the last of duplicate members, and for
    // Anthropic's json tool rebuilt the text from what it parsed: so the raw body is checked (the
    // envelope, and a tool input inline in it) as well as the answer text (JSON inside a string).
    const duplicate = duplicateMember(body) ?? duplicateMember(text);
    if (duplicate !== null) {
      return failure(
        'invalid_output',
        `the answer is ambiguous: it holds ${JSON.stringify(duplicate.slice(0, 100))} twice`,
        binding,
      );
    }
    const answer: JudgeAnswer = parsed.data;
    const problem = answerProblem(answer, req);
    if (problem) return failure('invalid_output', `the answer is inconsistent: ${problem}`, binding);
    // An allow names no argument (an empty name is none).
    if (answer.decision === 'allow') answer.failedArgument = null;
    // The exception is recorded as the policy writes it: the model's copy matched it only trimmed.
    const matched = answer.matchedException?.trim();
    if (matched !== undefined) answer.matchedException = req.exceptions.find((e) => e.trim() === matched)!;
    cache.set(key, answer, binding);
    return { ok: true, answer, binding, cached: false };
  }

  return {
    route,
    forget: (organizationId, toolName) => cache.forget(organizationId, toolName),

    async assist(schema, system, prompt, organizationId) {
      const r = route(null);
      if (!r.configured || !r.provider) return { ok: false, message: 'no model provider is configured' };
      const held = assisting.get(organizationId) ?? 0;
      if (held >= ASSIST_PER_ORGANIZATION) {
        return {
          ok: false,
          busy: true,
          message: `this organization already has ${held} policy assistant requests waiting for the model (at most ${ASSIST_PER_ORGANIZATION} at once)`,
        };
      }
      assisting.set(organizationId, held + 1);
      const adapter = adapters.get(r.provider)!;
      const signal = AbortSignal.timeout(settings.timeoutMs);
      try {
        const { object } = await assistLimiters
          .get(adapter.provider)!
          .run(signal, () => adapter.generate({ system, prompt, signal, schema }));
        const parsed = schema.safeParse(object);
        if (!parsed.success) return { ok: false, message: 'the answer does not match the schema' };
        return { ok: true, object: parsed.data, provider: adapter.provider, model: adapter.model };
      } catch (err) {
        if (err instanceof QueueFullError) {
          return { ok: false, message: 'too many policy assistant requests are waiting for this provider' };
        }
        return { ok: false, message: classify(err, signal, settings.timeoutMs).message };
      } finally {
        const left = (assisting.get(organizationId) ?? 1) - 1;
        if (left > 0) assisting.set(organizationId, left);
        else assisting.delete(organizationId);
      }
    },

    async judge(req) {
      const r = route(req.preferredModel);
      if (!r.configured || !r.provider) {
        const why = req.preferredModel
          ? `the preferred provider "${req.preferredModel}" is not configured and no default provider is`
          : 'no model provider is configured';
        return failure('not_configured', why, null);
      }
      const adapter = adapters.get(r.provider)!;
      // The arguments enter the key as the SHA-256 of their canonical JSON: the same calls hit, and
      // an entry stays small however large the arguments (up to the body limit) are.
      const key = [
        req.organizationId,
        req.toolName,
        req.policyVersion,
        req.policyHash,
        adapter.provider,
        adapter.model,
        hashJson(req.arguments),
      ].join('\u0000');
      const hit = cache.get(key);
      if (hit) return { ok: true, answer: hit.answer, binding: hit.binding, cached: true };
      // Identical calls judged at the same moment share one model request.
      const pending = inFlight.get(key);
      if (pending) return pending;
      const p = ask(adapter, req, key).finally(() => inFlight.delete(key));
      inFlight.set(key, p);
      return p;
    },
  };
}

export type PolicyJudge = ReturnType<typeof createJudge>;
