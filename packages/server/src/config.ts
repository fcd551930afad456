import { parseTtl } from './lib/duration.js';
import { loadLlmSettings } from './modules/llm-judge/config.js';
import type { LlmSettings } from './modules/llm-judge/model.js';

export interface Config {
  port: number;
  host: string;
  databaseUrl: string;
  jwtSecret: string | null;
  jwtJwksUrl: string | null;
  /** How long the identity provider's key set is used before it is fetched again. */
  jwtJwksCacheSeconds: number;
  jwtIssuer: string | null;
  jwtAudience: string | null;
  adminToken: string | null;
  baseUrl: string;
  docsUrl: string;
  logLevel: string;
  redisUrl: string | null;
  /** Prefix of every Redis key and channel, so several deployments (or test runs) can share one Redis. */
  redisPrefix: string;
  /** Lets MCP upstreams point at link-local and cloud metadata addresses (off: SSRF guard). */
  mcpAllowPrivateUpstreams: boolean;
  /** SVC_SIGNING_KEY_FILE: an operator-supplied Ed25519 private key (JWK or PEM, mode 0600). */
  signingKeyFile: string | null;
  /** How long a retired signing key stays published after a rotation (SVC_SIGNING_KEY_OVERLAP). */
  signingKeyOverlapSeconds: number;
  /** How often each grown receipt chain gets a signed checkpoint (SVC_CHECKPOINT_INTERVAL; 0 = on demand only). */
  checkpointIntervalMs: number;
  /**
   * Embedded store: commit decisions in a worker thread, off the event loop (default off: on a
   * two-core machine shared with other work it measured slower, see docs/benchmarks.md).
   */
  writerThread: boolean;
  /** Model providers for llm-mode policies and the policy assistant (SVC_LLM_*). */
  llm: LlmSettings;
}

export const DEFAULT_DATABASE_URL = 'sqlite:./data/svc.db';

function nonEmpty(value: string | undefined): string | null {
  return value !== undefined && value.trim() !== '' ? value.trim() : null;
}

function port(value: string | undefined): number {
  if (value === undefined || value === '') return 8080;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new Error(`PORT must be an integer 0-65535, got "${value}"`);
  return n;
}

function duration(name: string, value: string | undefined, fallback: number): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  try {
    return parseTtl(v);
  } catch {
    throw new Error(`${name} must be a duration such as 3600, 90m, 12h or 30d, got "${value}"`);
  }
}

function flag(name: string, value: string | undefined): boolean {
  const v = nonEmpty(value)?.toLowerCase();
  if (v === null || v === undefined || v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new Error(`${name} must be true or false, got "${value}"`);
}

function seconds(name: string, value: string | undefined, fallback: number): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 86_400)
    throw new Error(`${name} must be a whole number of seconds 1-86400, got "${value}"`);
  return n;
}

/** Reads the operator contract from the environment; invalid values stop the start with a clear message. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const host = nonEmpty(env.HOST) ?? '127.0.0.1';
  const p = port(env.PORT);
  const databaseUrl = nonEmpty(env.SVC_DATABASE_URL) ?? DEFAULT_DATABASE_URL;
  if (!/^(sqlite:|postgres(ql)?:\/\/)/.test(databaseUrl)) {
    throw new Error('SVC_DATABASE_URL must start with sqlite: or postgres://');
  }
  const baseUrl = (nonEmpty(env.SVC_BASE_URL) ?? `http://${host}:${p}`).replace(/\/+$/, '');
  return {
    port: p,
    host,
    databaseUrl,
    jwtSecret: nonEmpty(env.SVC_JWT_SECRET),
    jwtJwksUrl: nonEmpty(env.SVC_JWT_JWKS_URL),
    jwtJwksCacheSeconds: seconds('SVC_JWT_JWKS_CACHE_SECONDS', env.SVC_JWT_JWKS_CACHE_SECONDS, 600),
    jwtIssuer: nonEmpty(env.SVC_JWT_ISSUER),
    jwtAudience: nonEmpty(env.SVC_JWT_AUDIENCE),
    adminToken: nonEmpty(env.SVC_ADMIN_TOKEN),
    baseUrl,
    docsUrl: (nonEmpty(env.SVC_DOCS_URL) ?? `${baseUrl}/docs`).replace(/\/+$/, ''),
    logLevel: nonEmpty(env.SVC_LOG_LEVEL) ?? 'info',
    redisUrl: nonEmpty(env.SVC_REDIS_URL),
    redisPrefix: nonEmpty(env.SVC_REDIS_PREFIX) ?? 'svc:',
    mcpAllowPrivateUpstreams: flag('SVC_MCP_ALLOW_PRIVATE_UPSTREAMS', env.SVC_MCP_ALLOW_PRIVATE_UPSTREAMS),
    signingKeyFile: nonEmpty(env.SVC_SIGNING_KEY_FILE),
    signingKeyOverlapSeconds: duration('SVC_SIGNING_KEY_OVERLAP', env.SVC_SIGNING_KEY_OVERLAP, 30 * 86400),
    checkpointIntervalMs: duration('SVC_CHECKPOINT_INTERVAL', env.SVC_CHECKPOINT_INTERVAL, 5) * 1000,
    writerThread: flag('SVC_WRITER_THREAD', env.SVC_WRITER_THREAD),
    llm: loadLlmSettings(env),
  };
}
