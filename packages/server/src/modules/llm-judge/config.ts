import { type LlmSettings, PROVIDERS, type ProviderName, type ProviderSettings } from './model.js';

const DEFAULT_MODELS: Record<ProviderName, string> = {
  openai: 'gpt-4o-mini',
  anthropic: 'claude-3-5-haiku-latest',
  google: 'gemini-2.0-flash',
};

function nonEmpty(value: string | undefined): string | null {
  return value !== undefined && value.trim() !== '' ? value.trim() : null;
}

/**
 * Upper bounds of the SVC_LLM_* numbers. The timeout is a timer delay (at most 2147483647 ms in Node;
 * a longer one fires at once, or AbortSignal.timeout throws): 10 minutes is already far past any
 * caller's patience. The cache bounds keep one instance's memory and staleness in reason.
 */
export const LLM_LIMITS = {
  SVC_LLM_TIMEOUT_MS: 600_000,
  SVC_LLM_MAX_CONCURRENCY: 1_000,
  SVC_LLM_CACHE_TTL_MS: 86_400_000,
  SVC_LLM_CACHE_SIZE: 1_000_000,
} as const;

function positiveInt(name: keyof typeof LLM_LIMITS, value: string | undefined, fallback: number): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  const max = LLM_LIMITS[name];
  // Decimal digits only: Number() would also take 0x10, 1e3 or 5.0.
  const n = /^\d{1,16}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= max)) {
    throw new Error(`${name} must be an integer 1-${max}, got "${value}"`);
  }
  return n;
}

/** A URL the provider's paths are appended to: http(s), a host, no credentials, nothing after the path. */
function isBaseUrl(value: string): boolean {
  if (!/^https?:\/\//i.test(value) || /[?#]/.test(value)) return false;
  try {
    const url = new URL(value);
    // fetch refuses a URL with credentials in it.
    return url.hostname !== '' && url.username === '' && url.password === '';
  } catch {
    return false;
  }
}

/**
 * A provider counts as configured when it has an API key or a base URL: an OpenAI-compatible server
 * (vLLM, Ollama, LiteLLM) often needs no key.
 */
function provider(env: NodeJS.ProcessEnv, name: ProviderName): ProviderSettings | null {
  const prefix = `SVC_LLM_${name.toUpperCase()}`;
  const apiKey = nonEmpty(env[`${prefix}_API_KEY`]);
  const baseUrl = nonEmpty(env[`${prefix}_BASE_URL`]);
  if (apiKey === null && baseUrl === null) return null;
  if (baseUrl !== null && !isBaseUrl(baseUrl)) {
    throw new Error(
      `${prefix}_BASE_URL must be an http(s) URL with a host, no credentials and no query or fragment, got "${baseUrl}"`,
    );
  }
  return {
    apiKey,
    baseUrl: baseUrl?.replace(/\/+$/, '') ?? null,
    model: nonEmpty(env[`${prefix}_MODEL`]) ?? DEFAULT_MODELS[name],
  };
}

export function loadLlmSettings(env: NodeJS.ProcessEnv): LlmSettings {
  const providers = Object.fromEntries(
    PROVIDERS.map((p) => [p, provider(env, p)]),
  ) as LlmSettings['providers'];
  const named = nonEmpty(env.SVC_LLM_DEFAULT_PROVIDER)?.toLowerCase() ?? null;
  if (named !== null && !(PROVIDERS as readonly string[]).includes(named)) {
    throw new Error(`SVC_LLM_DEFAULT_PROVIDER must be one of ${PROVIDERS.join(', ')}, got "${named}"`);
  }
  // A default that is not configured would deny every llm policy ("no model provider is configured").
  if (named !== null && providers[named as ProviderName] === null) {
    const prefix = `SVC_LLM_${named.toUpperCase()}`;
    const configured = PROVIDERS.filter((p) => providers[p] !== null);
    throw new Error(
      `SVC_LLM_DEFAULT_PROVIDER is ${named} but that provider is not configured: set ${prefix}_API_KEY or ` +
        `${prefix}_BASE_URL${configured.length ? `, or name a configured one (${configured.join(', ')})` : ''}`,
    );
  }
  return {
    providers,
    defaultProvider: (named as ProviderName | null) ?? PROVIDERS.find((p) => providers[p] !== null) ?? null,
    timeoutMs: positiveInt('SVC_LLM_TIMEOUT_MS', env.SVC_LLM_TIMEOUT_MS, 10_000),
    maxConcurrency: positiveInt('SVC_LLM_MAX_CONCURRENCY', env.SVC_LLM_MAX_CONCURRENCY, 8),
    cacheTtlMs: positiveInt('SVC_LLM_CACHE_TTL_MS', env.SVC_LLM_CACHE_TTL_MS, 300_000),
    cacheSize: positiveInt('SVC_LLM_CACHE_SIZE', env.SVC_LLM_CACHE_SIZE, 10_000),
  };
}
