import { createAnthropic } from '@ai-sdk/anthropic';
import type { ProviderAdapter, ProviderSettings } from '../model.js';
import { providerFetch } from './fetch.js';
import { structuredAdapter } from './structured.js';

/** Anthropic's Messages API; SVC_LLM_ANTHROPIC_BASE_URL includes the version path (…/v1). */
export function anthropicAdapter(s: ProviderSettings): ProviderAdapter {
  const provider = createAnthropic({
    apiKey: s.apiKey ?? 'not-needed',
    ...(s.baseUrl ? { baseURL: s.baseUrl } : {}),
    fetch: providerFetch,
  });
  return structuredAdapter('anthropic', s.model, provider(s.model));
}
