import { createOpenAI } from '@ai-sdk/openai';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { providerFetch } from './fetch.js';
import { structuredAdapter } from './structured.js';

/**
 * OpenAI through the Chat Completions API (not Responses), which every OpenAI-compatible server
 * (vLLM, Ollama, LiteLLM) speaks; SVC_LLM_OPENAI_BASE_URL points at one of those.
 */
export function openaiAdapter(s: ProviderSettings): ProviderAdapter {
  const provider = createOpenAI({
    apiKey: s.apiKey ?? 'not-needed',
    ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
    fetch: providerFetch,
  });
  return structuredAdapter('openai', s.model, provider.chat(s.model));
}
