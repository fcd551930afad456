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
  /** Refused admin authentications a client address may make per minute before 429 (plugins/admin-throttle.ts). */
  adminRefusalsPerMinute: number;
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

/** An identity provider's URL (`name` is its variable): https, or http for one on this machine. */
function providerUrl(name: string, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`${name} must be a URL, got "${value}"`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && LOOPBACK.test(url.hostname))) {
    throw new Error(`${name} must use https (http only for a provider on localhost), got "${value}"`);
  }
  // fetch refuses every request to such a URL: no token or sign-in could ever be checked.
  if (url.username !== '' || url.password !== '') {
    throw new Error(`${name} must not hold a user name or password, got "${value}"`);
  }
  return url;
}

/** SVC_OIDC_*: all or nothing, HTTPS unless the provider runs on this machine. */
export function loadOidcSettings(env: Record<string, string | undefined>): OidcSettings | null {
  const issuer = nonEmpty(env.SVC_OIDC_ISSUER);
  const clientId = nonEmpty(env.SVC_OIDC_CLIENT_ID);
  if (issuer === null) {
    const set = [
      'SVC_OIDC_CLIENT_ID',
      'SVC_OIDC_CLIENT_SECRET',
      'SVC_OIDC_SCOPES',
      'SVC_OIDC_USER_CLAIM',
      'SVC_OIDC_NAME',
    ].filter((name) => nonEmpty(env[name]) !== null);
    if (set.length > 0)
      throw new Error(`${set.join(', ')} ${set.length > 1 ? 'are' : 'is'} set but SVC_OIDC_ISSUER is not`);
    return null;
  }
  if (clientId === null) throw new Error('SVC_OIDC_ISSUER is set: SVC_OIDC_CLIENT_ID is required too');
  const issuerUrl = providerUrl('SVC_OIDC_ISSUER', issuer);
  // OpenID Connect Discovery 1.0 §3: an issuer has no query or fragment; the provider's never matches one.
  if (issuerUrl.search !== '' || issuerUrl.hash !== '' || issuer.includes('?') || issuer.includes('#')) {
    throw new Error(`SVC_OIDC_ISSUER must not have a query or fragment, got "${issuer}"`);
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

/** Node keeps timer delays in a signed 32-bit integer: a longer delay fires after 1 ms instead. */
export const MAX_TIMER_MS = 2_147_483_647;
/** SVC_CHECKPOINT_INTERVAL at most 24 days: a timer delay (MAX_TIMER_MS is 24.8 days). */
export const MAX_CHECKPOINT_INTERVAL_SECONDS = 24 * 86_400;
/** SVC_SIGNING_KEY_OVERLAP at most 10 years: far from the end of the Date range. */
export const MAX_SIGNING_KEY_OVERLAP_SECONDS = 3650 * 86_400;
/** RFC 7518 §3.2: an HS256 key has at least 256 bits. The secret's UTF-8 bytes are the key. */
export const MIN_JWT_SECRET_BYTES = 32;
/** The shortest SVC_ADMIN_TOKEN taken. */
export const MIN_ADMIN_TOKEN_CHARS = 16;
/** The levels the logger (pino) knows; anything else stops the start. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

function nonEmpty(value: string | undefined): string | null {
  return value !== undefined && value.trim() !== '' ? value.trim() : null;
}

/**
 * PORT: decimal digits only (no 0x…, 1e4 or 80.0). 0 is allowed on purpose: the system picks a free
 * port, which the test suite uses; links then need SVC_BASE_URL (the default one would end in :0).
 */
function port(value: string | undefined): number {
  const v = nonEmpty(value);
  if (v === null) return 8080;
  const n = /^\d{1,5}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 0 && n <= 65535)) {
    throw new Error(`PORT must be a decimal integer 1-65535 (0: any free port), got "${value}"`);
  }
  return n;
}

/** A duration in seconds ("3600", "90m", "12h", "30d"), within [min, max]. */
function duration(
  name: string,
  value: string | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  let n: number;
  try {
    n = parseTtl(v);
  } catch {
    throw new Error(`${name} must be a duration such as 3600, 90m, 12h or 30d, got "${value}"`);
  }
  if (!(n >= min && n <= max)) {
    throw new Error(
      `${name} must be between ${formatSeconds(min)} and ${formatSeconds(max)}, got "${value}"`,
    );
  }
  return n;
}

/** 0s, 90s, 15m, 12h, 30d: the largest unit that divides the number of seconds. */
export function formatSeconds(s: number): string {
  if (s === 0) return '0s';
  if (s % 86_400 === 0) return `${s / 86_400}d`;
  if (s % 3600 === 0) return `${s / 3600}h`;
  if (s % 60 === 0) return `${s / 60}m`;
  return `${s}s`;
}

function flag(name: string, value: string | undefined, fallback = false): boolean {
  const v = nonEmpty(value)?.toLowerCase();
  if (v === null || v === undefined) return fallback;
  if (v === 'false' || v === '0') return false;
  if (v === 'true' || v === '1') return true;
  throw new Error(`${name} must be true or false, got "${value}"`);
}

function count(name: string, value: string | undefined, fallback: number, max: number): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  const n = /^\d{1,9}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= max)) throw new Error(`${name} must be a whole number 1-${max}, got "${value}"`);
  return n;
}

function seconds(name: string, value: string | undefined, fallback: number): number {
  const v = nonEmpty(value);
  if (v === null) return fallback;
  const n = /^\d{1,6}$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= 86_400))
    throw new Error(`${name} must be a whole number of seconds 1-86400, got "${value}"`);
  return n;
}

/**
 * Strict base64, standard or url-safe alphabet (not both), `=` padding optional but only as much as
 * completes the last group, and no unused bits set; null for anything else. Buffer.from(v, 'base64')
 * skips the characters it does not know, so a mistyped key would decode to other bytes.
 */
function strictBase64(v: string): Buffer | null {
  if (!/^(?:[A-Za-z0-9+/]*|[A-Za-z0-9_-]*)={0,2}$/.test(v)) return null;
  const body = v.replace(/=+$/, '');
  if (body.length !== v.length && v.length % 4 !== 0) return null;
  const bytes = Buffer.from(body, 'base64');
  // The bytes encode back to the text only if every character counted as written: no lone last
  // character, no unused bits set.
  const standard = body.replaceAll('-', '+').replaceAll('_', '/');
  return bytes.toString('base64').replace(/=+$/, '') === standard ? bytes : null;
}

/** A 32-byte key: exactly 64 hex digits, or strict base64 of 32 bytes. The value is never repeated. */
function aesKey(name: string, value: string | undefined): Buffer | null {
  const v = nonEmpty(value);
  if (v === null) return null;
  const key = /^[0-9a-fA-F]{64}$/.test(v) ? Buffer.from(v, 'hex') : strictBase64(v);
  if (key?.length !== 32) {
    const got = key ? `${key.length} bytes` : 'text that is neither 64 hex digits nor base64';
    throw new Error(
      `${name} must be 32 bytes, as 64 hex digits or base64 (e.g. openssl rand -base64 32), got ${got}`,
    );
  }
  return key;
}

/** An absolute http(s) URL without query or fragment (paths are appended to it); trailing slashes dropped. */
function httpUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(
      `${name} must be an absolute http(s) URL such as https://svc.example.com, got "${value}"`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(
      `${name} must be an absolute http(s) URL such as https://svc.example.com, got "${value}"`,
    );
  }
  if (url.search !== '' || url.hash !== '' || value.includes('?') || value.includes('#')) {
    throw new Error(`${name} must not have a query or fragment (paths are appended to it), got "${value}"`);
  }
  if (url.username !== '' || url.password !== '') {
    throw new Error(`${name} must not hold a user name or password, got "${value}"`);
  }
  // Links, the OpenID redirect URI and capsule issuers are built from the value as written, while
  // browsers, identity providers and URL parsers read its normal form: `https:svc.example.com` or a
  // default port would make links that lead elsewhere and redirect URIs that never match.
  const written = value.replace(/\/+$/, '');
  const normal = normalForm(url);
  if (written !== normal) {
    throw new Error(`${name} must be written in its normal form "${normal}", got "${value}"`);
  }
  return written;
}

/** A URL as parsers read it, without a trailing slash: how base and docs URLs are written. */
const normalForm = (url: URL): string => url.href.replace(/\/+$/, '');

/**
 * The path the interactive reference is mounted at on this server: SVC_DOCS_URL's path, or /docs when
 * it has none (documentation hosted at the root of another site).
 */
export function docsPathOf(docsUrl: string): string {
  try {
    const path = new URL(docsUrl).pathname.replace(/\/+$/, '');
    return path === '' ? '/docs' : path;
  } catch {
    return '/docs';
  }
}

/**
 * SVC_DOCS_URL, whose path is where the reference is mounted on this server (a path some route of
 * the service already takes is refused when the routes are registered: plugins/openapi.ts). Refused
 * here: a path the router cannot serve as written (it reads `:` and `*` as parameters, and matches
 * paths percent-decoded), and SVC_BASE_URL itself when that is the server's root, where the
 * dashboard is. Unset, it is SVC_BASE_URL/docs.
 */
function docsUrl(value: string | null, base: string): string {
  if (value === null) return `${base}/docs`;
  const url = httpUrl('SVC_DOCS_URL', value);
  const instead = `give the reference a path of its own such as ${base}/docs`;
  if (url === base && new URL(base).pathname === '/') {
    throw new Error(
      `SVC_DOCS_URL must not be SVC_BASE_URL itself, the root of this server where the dashboard is: ` +
        `${instead}, got "${value}"`,
    );
  }
  if (/[:*%]/.test(docsPathOf(url))) {
    throw new Error(
      `SVC_DOCS_URL must not have ':', '*' or a percent-encoded character in its path (the reference ` +
        `is served at it, and the router reads them otherwise): ${instead}, got "${value}"`,
    );
  }
  return url;
}

/**
 * SVC_BASE_URL at most 2048 characters: capsules name it as their issuer, which the capsule schema
 * caps at that length (a longer one would make every capsule mint fail).
 */
export const MAX_BASE_URL_CHARS = 2048;

function baseUrl(value: string): string {
  const url = httpUrl('SVC_BASE_URL', value);
  if (url.length > MAX_BASE_URL_CHARS) {
    throw new Error(
      `SVC_BASE_URL must be at most ${MAX_BASE_URL_CHARS} characters (capsules name it as their issuer), got ${url.length}`,
    );
  }
  return url;
}

/** SVC_JWT_JWKS_URL: as SVC_OIDC_ISSUER, https unless the provider runs on this machine. */
function jwksUrl(value: string | undefined, audience: string | undefined): string | null {
  const v = nonEmpty(value);
  if (v === null) return null;
  providerUrl('SVC_JWT_JWKS_URL', v);
  // A provider signs the tokens of every application it serves with the same keys: without an
  // audience, a token a user got for another application would be taken as one for svc.
  if (nonEmpty(audience) === null) {
    throw new Error(
      'SVC_JWT_JWKS_URL needs SVC_JWT_AUDIENCE: an identity provider signs the tokens of every ' +
        'application it serves with the same keys, so without an audience a token meant for another ' +
        "application would be accepted; set it to the audience (aud) your provider puts in svc's tokens",
    );
  }
  return v;
}

/** The operator admin token: long enough not to be guessed (the admin API controls tiers and keys). */
function adminToken(value: string | undefined): string | null {
  const v = nonEmpty(value);
  if (v === null) return null;
  const chars = [...v].length;
  if (chars < MIN_ADMIN_TOKEN_CHARS) {
    throw new Error(
      `SVC_ADMIN_TOKEN must be at least ${MIN_ADMIN_TOKEN_CHARS} characters (e.g. openssl rand -hex 16), got ${chars}`,
    );
  }
  return v;
}

function jwtSecret(value: string | undefined): string | null {
  const v = nonEmpty(value);
  if (v === null) return null;
  const bytes = Buffer.byteLength(v, 'utf8');
  if (bytes < MIN_JWT_SECRET_BYTES) {
    throw new Error(
      `SVC_JWT_SECRET must be at least ${MIN_JWT_SECRET_BYTES} bytes (an HS256 key of at least 256 bits, ` +
        `RFC 7518 §3.2; e.g. openssl rand -base64 32), got ${bytes}`,
    );
  }
  return v;
}

function logLevel(value: string | undefined): string {
  const v = nonEmpty(value);
  if (v === null) return 'info';
  const level = v.toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new Error(`SVC_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${value}"`);
  }
  return level;
}

function databaseUrl(value: string | undefined): string {
  const url = nonEmpty(value) ?? DEFAULT_DATABASE_URL;
  if (!/^(sqlite:|postgres(ql)?:\/\/)/.test(url)) {
    throw new Error('SVC_DATABASE_URL must start with sqlite: or postgres://');
  }
  if (!url.startsWith('sqlite:')) {
    // pg reads these with parseInt: "5s", PostgreSQL's own way to write 5 seconds, would be 5 ms. The
    // query is read as such (a socket URL, postgres://u@/db?host=/run/..., is no WHATWG URL), every
    // value of a repeated parameter (pg takes the last). The client's own bound is the statement
    // timeout plus 1 s, on a Node timer.
    const query = url.includes('?') ? url.slice(url.indexOf('?') + 1).split('#')[0]! : '';
    const params = new URLSearchParams(query);
    for (const name of ['statement_timeout', 'idle_in_transaction_session_timeout']) {
      for (const v of params.getAll(name)) {
        if (!/^\d+$/.test(v) || Number(v) > MAX_TIMER_MS - 1000) {
          throw new Error(
            `SVC_DATABASE_URL: ${name} must be a whole number of milliseconds up to ${MAX_TIMER_MS - 1000}, got "${v}"`,
          );
        }
      }
    }
  }
  // "sqlite:" alone used to open a store in memory, silently losing everything at exit.
  if (url.startsWith('sqlite:') && url.slice('sqlite:'.length).trim() === '') {
    throw new Error(
      'SVC_DATABASE_URL "sqlite:" names no file: give a path (e.g. sqlite:./data/svc.db); ' +
        'sqlite::memory: keeps everything in memory and loses it at exit',
    );
  }
  return url;
}

/**
 * `http://HOST:PORT` in its normal form, as SVC_BASE_URL must be written (lowercase host, no port 80):
 * the same links and OpenID redirect URI as an explicit base URL would give.
 */
function defaultBaseUrl(host: string, port: number): string {
  const written = `http://${host.includes(':') && !host.startsWith('[') ? `[${host}]` : host}:${port}`;
  try {
    return normalForm(new URL(written));
  } catch {
    return written; // not a host name at all: listening on it fails first
  }
}

/** Reads the operator contract from the environment; invalid values stop the start with a clear message. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const host = nonEmpty(env.HOST) ?? '127.0.0.1';
  const p = port(env.PORT);
  const explicitBase = nonEmpty(env.SVC_BASE_URL);
  const base = explicitBase ? baseUrl(explicitBase) : defaultBaseUrl(host, p);
  return {
    port: p,
    host,
    databaseUrl: databaseUrl(env.SVC_DATABASE_URL),
    jwtSecret: jwtSecret(env.SVC_JWT_SECRET),
    jwtJwksUrl: jwksUrl(env.SVC_JWT_JWKS_URL, env.SVC_JWT_AUDIENCE),
    jwtJwksCacheSeconds: seconds('SVC_JWT_JWKS_CACHE_SECONDS', env.SVC_JWT_JWKS_CACHE_SECONDS, 600),
    jwtIssuer: nonEmpty(env.SVC_JWT_ISSUER),
    jwtAudience: nonEmpty(env.SVC_JWT_AUDIENCE),
    adminToken: adminToken(env.SVC_ADMIN_TOKEN),
    adminRefusalsPerMinute: count(
      'SVC_ADMIN_REFUSALS_PER_MINUTE',
      env.SVC_ADMIN_REFUSALS_PER_MINUTE,
      10,
      1_000_000,
    ),
    baseUrl: base,
    docsUrl: docsUrl(nonEmpty(env.SVC_DOCS_URL), base),
    logLevel: logLevel(env.SVC_LOG_LEVEL),
    redisUrl: nonEmpty(env.SVC_REDIS_URL),
    redisPrefix: nonEmpty(env.SVC_REDIS_PREFIX) ?? 'svc:',
    mcpAllowPrivateUpstreams: flag('SVC_MCP_ALLOW_PRIVATE_UPSTREAMS', env.SVC_MCP_ALLOW_PRIVATE_UPSTREAMS),
    providerCredentialsKey: aesKey('SVC_PROVIDER_CREDENTIALS_KEY', env.SVC_PROVIDER_CREDENTIALS_KEY),
    signingKeyFile: nonEmpty(env.SVC_SIGNING_KEY_FILE),
    oidc: loadOidcSettings(env),
    signingKeyOverlapSeconds: duration(
      'SVC_SIGNING_KEY_OVERLAP',
      env.SVC_SIGNING_KEY_OVERLAP,
      30 * 86_400,
      0,
      MAX_SIGNING_KEY_OVERLAP_SECONDS,
    ),
    checkpointIntervalMs:
      duration(
        'SVC_CHECKPOINT_INTERVAL',
        env.SVC_CHECKPOINT_INTERVAL,
        5,
        0,
        MAX_CHECKPOINT_INTERVAL_SECONDS,
      ) * 1000,
    writerThread: flag('SVC_WRITER_THREAD', env.SVC_WRITER_THREAD, true),
    llm: loadLlmSettings(env),
  };
}
