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
  /**
   * SVC_PROVIDER_CREDENTIALS_KEY: 32 bytes (base64 or 64 hex digits) that seal payment-provider
   * credentials at rest (AES-256-GCM). Without it, provider connections cannot hold credentials.
   */
  providerCredentialsKey: Buffer | null;
  /** SVC_SIGNING_KEY_FILE: an operator-supplied Ed25519 private key (JWK or PEM, mode 0600). */
  signingKeyFile: string | null;
  /** How long a retired signing key stays published after a rotation (SVC_SIGNING_KEY_OVERLAP). */
  signingKeyOverlapSeconds: number;
  /** How often each grown receipt chain gets a signed checkpoint (SVC_CHECKPOINT_INTERVAL; 0 = on demand only). */
  checkpointIntervalMs: number;
  /**
   * Embedded store in a file: commit decisions in a worker thread, off the event loop (default on:
   * the event loop keeps serving during each fsync, which keeps the tail latency under load down;
   * SVC_WRITER_THREAD=false commits on the event loop, see docs/benchmarks.md).
   */
  writerThread: boolean;
  /** Model providers for llm-mode policies and the policy assistant (SVC_LLM_*). */
  llm: LlmSettings;
  /** Dashboard sign-in through an OpenID Connect provider (SVC_OIDC_*); null: login links only. */
  oidc: OidcSettings | null;
}

export interface OidcSettings {
  /** The provider's issuer URL; its discovery document is read from `<issuer>/.well-known/openid-configuration`. */
  issuer: string;
  clientId: string;
  /** Confidential client (client_secret_basic); null for a public client (PKCE only). */
  clientSecret: string | null;
  scopes: string;
  /** The ID-token claim that names the person (their user id here); `sub` by default. */
  userClaim: string;
  /** How the sign-in page names the provider. */
  displayName: string;
}

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/;

/** SVC_OIDC_*: all or nothing, HTTPS unless the provider runs on this machine. */
export function loadOidcSettings(env: Record<string, string | undefined>): OidcSettings | null {
  const issuer = nonEmpty(env.SVC_OIDC_ISSUER);
  const clientId = nonEmpty(env.SVC_OIDC_CLIENT_ID);
  if (issuer === null) {
    if (clientId !== null || nonEmpty(env.SVC_OIDC_CLIENT_SECRET) !== null) {
      throw new Error('SVC_OIDC_CLIENT_ID/SVC_OIDC_CLIENT_SECRET are set but SVC_OIDC_ISSUER is not');
    }
    return null;
  }
  if (clientId === null) throw new Error('SVC_OIDC_ISSUER is set: SVC_OIDC_CLIENT_ID is required too');
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw new Error(`SVC_OIDC_ISSUER must be a URL, got "${issuer}"`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && LOOPBACK.test(url.hostname))) {
    throw new Error(
      `SVC_OIDC_ISSUER must use https (http only for a provider on localhost), got "${issuer}"`,
    );
  }
  const scopes = nonEmpty(env.SVC_OIDC_SCOPES) ?? 'openid profile email';
  if (!scopes.split(/\s+/).includes('openid')) {
    throw new Error(`SVC_OIDC_SCOPES must include openid, got "${scopes}"`);
  }
  return {
    issuer,
    clientId,
    clientSecret: nonEmpty(env.SVC_OIDC_CLIENT_SECRET),
    scopes,
    userClaim: nonEmpty(env.SVC_OIDC_USER_CLAIM) ?? 'sub',
    displayName: nonEmpty(env.SVC_OIDC_NAME) ?? 'your identity provider',
  };
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

function flag(name: string, value: string | undefined, fallback = false): boolean {
  const v = nonEmpty(value)?.toLowerCase();
  if (v === null || v === undefined) return fallback;
  if (v === 'false' || v === '0') return false;
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

function aesKey(name: string, value: string | undefined): Buffer | null {
  const v = nonEmpty(value);
  if (v === null) return null;
  const key = /^[0-9a-fA-F]{64}$/.test(v) ? Buffer.from(v, 'hex') : Buffer.from(v, 'base64');
  if (key.length !== 32) {
    throw new Error(`${name} must be 32 bytes, as 64 hex digits or base64 (e.g. openssl rand -base64 32)`);
  }
  return key;
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
    providerCredentialsKey: aesKey('SVC_PROVIDER_CREDENTIALS_KEY', env.SVC_PROVIDER_CREDENTIALS_KEY),
    signingKeyFile: nonEmpty(env.SVC_SIGNING_KEY_FILE),
    oidc: loadOidcSettings(env),
    signingKeyOverlapSeconds: duration('SVC_SIGNING_KEY_OVERLAP', env.SVC_SIGNING_KEY_OVERLAP, 30 * 86400),
    checkpointIntervalMs: duration('SVC_CHECKPOINT_INTERVAL', env.SVC_CHECKPOINT_INTERVAL, 5) * 1000,
    writerThread: flag('SVC_WRITER_THREAD', env.SVC_WRITER_THREAD, true),
    llm: loadLlmSettings(env),
  };
}
