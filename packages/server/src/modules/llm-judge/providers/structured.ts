import { generateText, type LanguageModel, NoObjectGeneratedError, Output } from 'ai';
import type { ZodType } from 'zod';
import type { ProviderAdapter, ProviderName } from '../model.js';
import { ANSWER_SCHEMA } from '../prompt.js';

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
 * One structured-output call through the AI SDK, the same for every provider: no retries (a retry
 * would outlive the caller's deadline), the caller's abort signal, the answer schema.
 */
export function structuredAdapter(provider: ProviderName, model: string, lm: LanguageModel): ProviderAdapter {
  async function call(system: string, prompt: string, signal: AbortSignal, schema: ZodType) {
    try {
      const result = await generateText({
        model: lm,
        system,
        prompt,
        output: Output.object({ schema, name: 'answer' }),
        maxRetries: 0,
        abortSignal: signal,
        maxOutputTokens: 2048,
      });
      return { text: result.text, object: result.output as unknown };
    } catch (err) {
      if (NoObjectGeneratedError.isInstance(err)) {
        throw new MalformedAnswerError(err.message, err.text ?? null);
      }
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
