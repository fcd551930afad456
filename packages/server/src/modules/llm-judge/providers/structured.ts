import { generateText, type LanguageModel, NoObjectGeneratedError, Output } from 'ai';
import type { ZodType } from 'zod';
import type { ProviderAdapter, ProviderName } from '../model.js';
import { ANSWER_SCHEMA } from '../prompt.js';
import { type Exchange, recordingFetch } from './fetch.js';
import { rawAnswerText, UnlocatedAnswerError } from './raw.js';

// The SDK prints compatibility warnings to the console; the service logs through pino only.
(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false;

/** Raised when the model answered but the answer is not the schema's object; carries the raw text. */
export class MalformedAnswerError extends Error {
  constructor(
    message: string,
    readonly text: string | null,
  ) {
    super(message);
  }
}

/**
 * Raised when the provider marks the answer as refused or withheld (OpenAI's `refusal` or
 * `content_filter`, Anthropic's `refusal`, Gemini's SAFETY, BLOCKLIST and the like, or an error
 * finish): whatever text came with it is not an answer to believe, even when it reads as one.
 */
export class RefusedAnswerError extends MalformedAnswerError {}

/** Finish reasons (the SDK's, for every provider) under which no answer is believed. */
const REFUSED = new Set(['content-filter', 'error']);

/**
 * One structured-output call through the AI SDK, the same for every provider: no retries (a retry
 * would outlive the caller's deadline), the caller's abort signal, the answer schema. `modelFor`
 * builds the provider's model on the fetch given, once per call, so that each call keeps its own
 * raw exchange: `text` is the raw answer text (see rawAnswerText) and `body` the answer body as received.
 */
export function structuredAdapter(
  provider: ProviderName,
  model: string,
  modelFor: (fetch: typeof globalThis.fetch) => LanguageModel,
): ProviderAdapter {
  async function call(system: string, prompt: string, signal: AbortSignal, schema: ZodType) {
    const exchange: Exchange = { request: null, response: null };
    try {
      const result = await generateText({
        model: modelFor(recordingFetch(exchange)),
        system,
        prompt,
        output: Output.object({ schema, name: 'answer' }),
        maxRetries: 0,
        abortSignal: signal,
        maxOutputTokens: 2048,
      });
      if (exchange.response === null) throw new UnlocatedAnswerError('no answer body was received');
      if (REFUSED.has(result.finishReason)) {
        let text: string | null = null;
        try {
          text = rawAnswerText(provider, exchange, result.text);
        } catch {
          // The answer could not be told from the body: nothing to bind.
        }
        throw new RefusedAnswerError(`the answer finished with ${result.finishReason}`, text);
      }
      return {
        text: rawAnswerText(provider, exchange, result.text),
        object: result.output as unknown,
        body: exchange.response,
      };
    } catch (err) {
      if (NoObjectGeneratedError.isInstance(err)) {
        let text: string | null = null;
        try {
          text = err.text === undefined ? null : rawAnswerText(provider, exchange, err.text);
        } catch {
          // The answer could not be told from the body: nothing to bind.
        }
        if (err.finishReason !== undefined && REFUSED.has(err.finishReason)) {
          throw new RefusedAnswerError(`the answer finished with ${err.finishReason}`, text);
        }
        throw new MalformedAnswerError(err.message, text);
      }
      if (err instanceof UnlocatedAnswerError) throw new MalformedAnswerError(err.message, null);
      throw err;
    }
  }
  return {
    provider,
    model,
    complete: ({ system, prompt, signal }) => call(system, prompt, signal, ANSWER_SCHEMA),
    generate: ({ system, prompt, signal, schema }) => call(system, prompt, signal, schema),
  };
}
