import { createGoogleGenerativeAI } from '@ai-sdk/google';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { providerFetch } from './fetch.js';
import { structuredAdapter } from './structured.js';

/** The Gemini API (generateContent); SVC_LLM_GOOGLE_BASE_URL includes the version path (…/v1beta). */
export function googleAdapter(s: ProviderSettings): ProviderAdapter {
  const provider = createGoogleGenerativeAI({
    apiKey: s.apiKey ?? 'not-needed',
    ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
    fetch: providerFetch,
  });
  return structuredAdapter('google', s.model, provider(s.model));
}
