import { APICallError } from 'ai';
import type { ZodType } from 'zod';
import { canonicalJson, sha256Tagged } from '../../ledger/canonical.js';
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
import { MalformedAnswerError } from './providers/structured.js';

const ADAPTERS: Record<ProviderName, (s: ProviderSettings) => ProviderAdapter> = {
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  google: googleAdapter,
};

/** Waiting calls allowed per provider, per slot: beyond that a call is refused at once, not queued. */
const QUEUE_PER_SLOT = 16;

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
  /** A structured call on the default provider for the policy assistant, under the same limits. */
  assist: (schema: ZodType, system: string, prompt: string) => Promise<Assisted>;
} {
  const adapters = new Map<ProviderName, ProviderAdapter>();
  const limiters = new Map<ProviderName, ConcurrencyLimiter>();
  for (const [name, s] of Object.entries(settings.providers) as [ProviderName, ProviderSettings | null][]) {
    if (!s) continue;
    adapters.set(name, ADAPTERS[name](s));
    limiters.set(
      name,
      new ConcurrencyLimiter(settings.maxConcurrency, settings.maxConcurrency * QUEUE_PER_SLOT),
    );
  }
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
    cache.set(key, answer, binding);
    return { ok: true, answer, binding, cached: false };
  }

  return {
    route,
    forget: (organizationId, toolName) => cache.forget(organizationId, toolName),

    /** A structured call on the default provider for the policy assistant, under the same limits. */
    async assist(schema, system, prompt) {
      const r = route(null);
      if (!r.configured || !r.provider) return { ok: false, message: 'no model provider is configured' };
      const adapter = adapters.get(r.provider)!;
      const signal = AbortSignal.timeout(settings.timeoutMs);
      try {
        const { object } = await limiters
          .get(adapter.provider)!
          .run(signal, () => adapter.generate({ system, prompt, signal, schema }));
        const parsed = schema.safeParse(object);
        if (!parsed.success) return { ok: false, message: 'the answer does not match the schema' };
        return { ok: true, object: parsed.data, provider: adapter.provider, model: adapter.model };
      } catch (err) {
        return { ok: false, message: classify(err, signal, settings.timeoutMs).message };
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
      const key = [
        req.organizationId,
        req.toolName,
        req.policyVersion,
        req.policyHash,
        adapter.provider,
        adapter.model,
        canonicalJson(req.arguments),
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
