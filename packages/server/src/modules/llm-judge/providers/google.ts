import { createGoogleGenerativeAI } from '@ai-sdk/google';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { structuredAdapter } from './structured.js';

/** The Gemini API (generateContent); SVC_LLM_GOOGLE_BASE_URL includes the version path (…/v1beta). */
export function googleAdapter(s: ProviderSettings): ProviderAdapter {
  // One provider object per call, whose fetch keeps that call's raw exchange (see recordingFetch).
  return structuredAdapter('google', s.model, (fetch) => {
    const provider = createGoogleGenerativeAI({
      apiKey: s.apiKey ?? 'not-needed',
      ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
      fetch,
    });
    return provider(s.model);
  });
}
