import { createOpenAI } from '@ai-sdk/openai';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { structuredAdapter } from './structured.js';

/**
 * OpenAI through the Chat Completions API (not Responses), which every OpenAI-compatible server
 * (vLLM, Ollama, LiteLLM) speaks; SVC_LLM_OPENAI_BASE_URL points at one of those.
 */
export function openaiAdapter(s: ProviderSettings): ProviderAdapter {
  // One provider object per call, whose fetch keeps that call's raw exchange (see recordingFetch).
  return structuredAdapter('openai', s.model, (fetch) => {
    const provider = createOpenAI({
      apiKey: s.apiKey ?? 'not-needed',
      ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
      fetch,
    });
    return provider.chat(s.model);
  });
}
