import { createAnthropic } from '@ai-sdk/anthropic';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { structuredAdapter } from './structured.js';

/** Anthropic's Messages API; SVC_LLM_ANTHROPIC_BASE_URL includes the version path (…/v1). */
export function anthropicAdapter(s: ProviderSettings): ProviderAdapter {
  // One provider object per call, whose fetch keeps that call's raw exchange (see recordingFetch).
  return structuredAdapter('anthropic', s.model, (fetch) => {
    const provider = createAnthropic({
      apiKey: s.apiKey ?? 'not-needed',
      ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
      fetch,
    });
    return provider(s.model);
  });
}
