import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { JWT_SECRET } from '../test/helpers.js';
import {
  docsPathOf,
  LOG_LEVELS,
  loadConfig,
  MAX_BASE_URL_CHARS,
  MAX_CHECKPOINT_INTERVAL_SECONDS,
  MAX_SIGNING_KEY_OVERLAP_SECONDS,
  MAX_TIMER_MS,
} from './config.js';

/** The message loadConfig stops the start with, or null when it accepts the environment. */
function refusal(env: Record<string, string>): string | null {
  try {
    loadConfig(env);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/** The audience SVC_JWT_JWKS_URL needs. */
const AUD = { SVC_JWT_AUDIENCE: 'svc' };

describe('loadConfig: upper bounds of durations', () => {
  it('refuses a checkpoint interval longer than a Node timer can wait, naming the variable', () => {
    // 25d is over the 24.8 days of a timer delay: the interval used to fire every millisecond.
    for (const v of ['25d', '2147484', '99999999999999999999d']) {
      expect(refusal({ SVC_CHECKPOINT_INTERVAL: v })).toMatch(
        /^SVC_CHECKPOINT_INTERVAL must be between 0s and 24d/,
      );
    }
    expect(loadConfig({ SVC_CHECKPOINT_INTERVAL: '24d' }).checkpointIntervalMs).toBe(24 * 86_400_000);
    expect(MAX_CHECKPOINT_INTERVAL_SECONDS * 1000).toBeLessThanOrEqual(MAX_TIMER_MS);
    expect(loadConfig({ SVC_CHECKPOINT_INTERVAL: '0' }).checkpointIntervalMs).toBe(0);
    expect(loadConfig({}).checkpointIntervalMs).toBe(5000);
  });

  it('refuses a signing key overlap whose end is no valid date, naming the variable', () => {
    for (const v of ['99999999999d', '3651d']) {
      expect(refusal({ SVC_SIGNING_KEY_OVERLAP: v })).toMatch(
        /^SVC_SIGNING_KEY_OVERLAP must be between 0s and 3650d/,
      );
    }
    const { signingKeyOverlapSeconds } = loadConfig({ SVC_SIGNING_KEY_OVERLAP: '3650d' });
    expect(signingKeyOverlapSeconds).toBe(MAX_SIGNING_KEY_OVERLAP_SECONDS);
    // The published-until date of a key retired now (signing/keyset.ts) is a valid date.
    expect(() => new Date(Date.now() + signingKeyOverlapSeconds * 1000).toISOString()).not.toThrow();
    expect(loadConfig({}).signingKeyOverlapSeconds).toBe(30 * 86_400);
  });

  it('refuses a provider base URL the provider paths cannot be appended to', () => {
    for (const v of [
      'http://bad host:11434/v1',
      'http://',
      'http://x/v1?key=1',
      'http://x/v1#f',
      'ftp://x',
      'http://u:p@x/v1',
    ]) {
      expect(refusal({ SVC_LLM_OPENAI_BASE_URL: v })).toMatch(
        /^SVC_LLM_OPENAI_BASE_URL must be an http\(s\) URL/,
      );
    }
    expect(
      loadConfig({ SVC_LLM_OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1/' }).llm.providers.openai,
    ).toMatchObject({
      baseUrl: 'http://127.0.0.1:11434/v1',
    });
  });

  it('refuses any SVC_OIDC_* setting without SVC_OIDC_ISSUER, naming what is set', () => {
    expect(refusal({ SVC_OIDC_SCOPES: 'profile email', SVC_OIDC_NAME: 'Corp' })).toBe(
      'SVC_OIDC_SCOPES, SVC_OIDC_NAME are set but SVC_OIDC_ISSUER is not',
    );
    expect(refusal({ SVC_OIDC_USER_CLAIM: 'email' })).toBe(
      'SVC_OIDC_USER_CLAIM is set but SVC_OIDC_ISSUER is not',
    );
  });

  it('refuses the SVC_LLM_* numbers past their bounds, naming the variable', () => {
    // 3000000000 made every judgement time out at once; 5000000000 made AbortSignal.timeout throw.
    for (const v of ['3000000000', '5000000000', '600001']) {
      expect(refusal({ SVC_LLM_TIMEOUT_MS: v })).toMatch(/^SVC_LLM_TIMEOUT_MS must be an integer 1-600000/);
    }
    expect(refusal({ SVC_LLM_MAX_CONCURRENCY: '1001' })).toMatch(
      /^SVC_LLM_MAX_CONCURRENCY must be an integer 1-1000/,
    );
    expect(refusal({ SVC_LLM_CACHE_TTL_MS: '86400001' })).toMatch(
      /^SVC_LLM_CACHE_TTL_MS must be an integer 1-86400000/,
    );
    expect(refusal({ SVC_LLM_CACHE_SIZE: '1000001' })).toMatch(
      /^SVC_LLM_CACHE_SIZE must be an integer 1-1000000/,
    );
    const max = loadConfig({
      SVC_LLM_TIMEOUT_MS: '600000',
      SVC_LLM_MAX_CONCURRENCY: '1000',
      SVC_LLM_CACHE_TTL_MS: '86400000',
      SVC_LLM_CACHE_SIZE: '1000000',
    }).llm;
    expect(max).toMatchObject({
      timeoutMs: 600_000,
      maxConcurrency: 1000,
      cacheTtlMs: 86_400_000,
      cacheSize: 1_000_000,
    });
    expect(max.timeoutMs).toBeLessThanOrEqual(MAX_TIMER_MS);
    expect(() => AbortSignal.timeout(max.timeoutMs)).not.toThrow();
    // Only decimal integers, as for PORT.
    for (const v of ['0x10', '1e3', '5.0', '0', '-1']) {
      expect(refusal({ SVC_LLM_TIMEOUT_MS: v })).toMatch(/^SVC_LLM_TIMEOUT_MS must be an integer/);
    }
  });

  it('keeps the JWKS cache within a day, decimal seconds only', () => {
    for (const v of ['86401', '0', '1e3', '0x10']) {
      expect(refusal({ SVC_JWT_JWKS_CACHE_SECONDS: v })).toMatch(/^SVC_JWT_JWKS_CACHE_SECONDS must be/);
    }
    expect(loadConfig({ SVC_JWT_JWKS_CACHE_SECONDS: '86400' }).jwtJwksCacheSeconds).toBe(86_400);
  });
});

describe('loadConfig: SVC_DATABASE_URL', () => {
  it('refuses sqlite: without a path, which used to keep everything in memory', () => {
    for (const v of ['sqlite:', 'sqlite:  ']) {
      expect(refusal({ SVC_DATABASE_URL: v })).toMatch(/^SVC_DATABASE_URL "sqlite:" names no file/);
    }
  });

  it('refuses a PostgreSQL timeout in the URL that is not whole milliseconds (pg would read "5s" as 5 ms)', () => {
    for (const [name, v] of [
      ['statement_timeout', '200s'],
      ['statement_timeout', 'abc'],
      ['statement_timeout', ''],
      ['idle_in_transaction_session_timeout', '1min'],
    ]) {
      expect(refusal({ SVC_DATABASE_URL: `postgres://u@127.0.0.1:5432/db?${name}=${v}` })).toBe(
        `SVC_DATABASE_URL: ${name} must be a whole number of milliseconds up to 2147482647, got "${v}"`,
      );
    }
    // A socket URL, a repeated parameter (pg takes the last), a bound past a Node timer.
    for (const url of [
      'postgres://u@/db?host=/var/run/postgresql&statement_timeout=5s',
      'postgres://u@127.0.0.1:5432/db?statement_timeout=5000&statement_timeout=5s',
      'postgres://u@127.0.0.1:5432/db?statement_timeout=2147483000',
    ]) {
      expect(refusal({ SVC_DATABASE_URL: url }), url).toMatch(/^SVC_DATABASE_URL: statement_timeout must be/);
    }
    const ok =
      'postgres://u@127.0.0.1:5432/db?statement_timeout=200000&idle_in_transaction_session_timeout=0';
    expect(loadConfig({ SVC_DATABASE_URL: ok }).databaseUrl).toBe(ok);
  });

  it('accepts a file, PostgreSQL, and an explicit sqlite::memory:', () => {
    expect(loadConfig({}).databaseUrl).toBe('sqlite:./data/svc.db');
    expect(loadConfig({ SVC_DATABASE_URL: 'sqlite:/var/lib/svc/svc.db' }).databaseUrl).toBe(
      'sqlite:/var/lib/svc/svc.db',
    );
    expect(loadConfig({ SVC_DATABASE_URL: 'sqlite::memory:' }).databaseUrl).toBe('sqlite::memory:');
    expect(loadConfig({ SVC_DATABASE_URL: 'postgres://svc@db:5432/svc' }).databaseUrl).toBe(
      'postgres://svc@db:5432/svc',
    );
    expect(refusal({ SVC_DATABASE_URL: 'mysql://x' })).toMatch(/^SVC_DATABASE_URL must start with/);
  });
});

describe('loadConfig: values checked at start', () => {
  it('takes PORT as a decimal integer 1-65535, or 0 for any free port', () => {
    for (const v of ['0x4a9d', '1e4', '80.0', '-1', '65536', '+80', '8 0', 'http']) {
      expect(refusal({ PORT: v })).toMatch(/^PORT must be a decimal integer 1-65535/);
    }
    expect(loadConfig({ PORT: '19130' })).toMatchObject({ port: 19130, baseUrl: 'http://127.0.0.1:19130' });
    expect(loadConfig({ PORT: '65535' }).port).toBe(65535);
    expect(loadConfig({ PORT: '0' }).port).toBe(0);
    expect(loadConfig({}).port).toBe(8080);
  });

  it('requires SVC_BASE_URL and SVC_DOCS_URL to be absolute http(s) URLs', () => {
    for (const [name, v] of [
      ['SVC_BASE_URL', 'not-a-url'],
      ['SVC_BASE_URL', 'ftp://svc.example.com'],
      ['SVC_BASE_URL', '/svc'],
      ['SVC_BASE_URL', 'https://svc.example.com/?x=1'],
      ['SVC_DOCS_URL', 'not-a-url'],
      ['SVC_DOCS_URL', 'javascript:alert(1)'],
      ['SVC_DOCS_URL', 'https://docs.example.com/#top'],
    ] as const) {
      expect(refusal({ [name]: v }), `${name}=${v}`).toMatch(new RegExp(`^${name} must`));
    }
    expect(
      loadConfig({ SVC_BASE_URL: 'https://svc.example.com/', SVC_DOCS_URL: 'https://docs.example.com/svc/' }),
    ).toMatchObject({ baseUrl: 'https://svc.example.com', docsUrl: 'https://docs.example.com/svc' });
    expect(loadConfig({ SVC_BASE_URL: 'https://svc.example.com/api' }).docsUrl).toBe(
      'https://svc.example.com/api/docs',
    );
    // The default base URL is a URL too, also on an IPv6 host.
    expect(loadConfig({ HOST: '::', PORT: '8080' }).baseUrl).toBe('http://[::]:8080');
    // Built in its normal form, as an explicit SVC_BASE_URL must be written.
    expect(loadConfig({ HOST: 'SVC.Example.COM', PORT: '80' }).baseUrl).toBe('http://svc.example.com');
    expect(() => new URL(loadConfig({ HOST: '::1' }).baseUrl)).not.toThrow();
  });

  it('refuses an SVC_BASE_URL too long to be a capsule issuer (2048 characters)', () => {
    const at = (n: number) => `https://svc.example.com/${'x'.repeat(n - 'https://svc.example.com/'.length)}`;
    expect(loadConfig({ SVC_BASE_URL: at(MAX_BASE_URL_CHARS) }).baseUrl).toHaveLength(MAX_BASE_URL_CHARS);
    // A trailing slash is not part of it.
    expect(loadConfig({ SVC_BASE_URL: `${at(MAX_BASE_URL_CHARS)}/` }).baseUrl).toBe(at(MAX_BASE_URL_CHARS));
    expect(refusal({ SVC_BASE_URL: at(MAX_BASE_URL_CHARS + 1) })).toBe(
      'SVC_BASE_URL must be at most 2048 characters (capsules name it as their issuer), got 2049',
    );
    expect(refusal({ SVC_BASE_URL: `http://127.0.0.1:8080/${'x'.repeat(2100)}` })).toMatch(
      /^SVC_BASE_URL must be at most 2048 characters/,
    );
  });

  it('refuses an SVC_BASE_URL or SVC_DOCS_URL not written as a URL parser reads it', () => {
    // Each is read as another address than the text links and redirect URIs are built from.
    for (const [v, normal] of [
      ['https:svc.example.com', 'https://svc.example.com'],
      ['https://svc.example.com:443', 'https://svc.example.com'],
      ['http://svc.example.com:80/api', 'http://svc.example.com/api'],
      ['https://SVC.example.com', 'https://svc.example.com'],
      ['HTTPS://svc.example.com', 'https://svc.example.com'],
      ['https://svc.example.com/a/../b', 'https://svc.example.com/b'],
      ['https://svc.example.com\\api', 'https://svc.example.com/api'],
      ['https://svc.example.com/a b', 'https://svc.example.com/a%20b'],
      ['https://svc.example.com/a\tb', 'https://svc.example.com/ab'],
      ['https://exämple.com', 'https://xn--exmple-cua.com'],
    ] as const) {
      expect(refusal({ SVC_BASE_URL: v }), v).toBe(
        `SVC_BASE_URL must be written in its normal form "${normal}", got "${v}"`,
      );
      expect(refusal({ SVC_DOCS_URL: v }), v).toMatch(/^SVC_DOCS_URL must be written in its normal form/);
      expect(refusal({ SVC_BASE_URL: normal }), normal).toBeNull();
    }
    for (const v of ['http://[::1]:8080', 'https://svc.example.com/api', 'http://127.0.0.1:8080/%7Efoo']) {
      expect(loadConfig({ SVC_BASE_URL: v }).baseUrl).toBe(v);
    }
  });

  it('refuses an SVC_DOCS_URL the router cannot serve, or that is the root of this server', () => {
    // A path a route of the service takes is refused when the routes are registered (openapi.test.ts).
    // The root of this server is the dashboard's, and no error page lies under it.
    for (const [base, v] of [
      [undefined, 'http://127.0.0.1:8080'],
      [undefined, 'http://127.0.0.1:8080/'],
      ['https://svc.example.com', 'https://svc.example.com/'],
    ] as const) {
      expect(refusal({ ...(base ? { SVC_BASE_URL: base } : {}), SVC_DOCS_URL: v }), v).toMatch(
        /^SVC_DOCS_URL must not be SVC_BASE_URL itself, the root of this server where the dashboard is: /,
      );
    }
    // The router reads : and * as parameters and matches paths percent-decoded.
    for (const v of [
      'https://svc.example.com/doc:s',
      'https://svc.example.com/*',
      'https://svc.example.com/d%C3%B6cs',
    ]) {
      expect(refusal({ SVC_DOCS_URL: v }), v).toMatch(
        /^SVC_DOCS_URL must not have ':', '\*' or a percent-encoded character in its path/,
      );
    }
    for (const v of [
      'http://127.0.0.1:8080/reference',
      'http://127.0.0.1:8080/v1docs',
      'http://127.0.0.1:8080/api-docs/v2',
      'http://127.0.0.1:8080/api+docs',
      'https://docs.example.com/v1/reference',
      // Documentation at another site's root: the reference is served at /docs here.
      'https://docs.example.com',
    ]) {
      expect(loadConfig({ SVC_DOCS_URL: v }).docsUrl, v).toBe(v);
    }
    // SVC_BASE_URL with a path: the dashboard is at the server's root, the reference at /api.
    const api = 'https://svc.example.com/api';
    expect(loadConfig({ SVC_BASE_URL: api, SVC_DOCS_URL: api }).docsUrl).toBe(api);
    expect(docsPathOf(loadConfig({ SVC_DOCS_URL: 'https://docs.example.com/' }).docsUrl)).toBe('/docs');
    // Unset, it follows SVC_BASE_URL as before.
    expect(loadConfig({ SVC_BASE_URL: 'https://svc.example.com/api' }).docsUrl).toBe(
      'https://svc.example.com/api/docs',
    );
  });

  it('refuses identity provider URLs that no request could be sent to or matched with', () => {
    // fetch refuses a URL holding credentials: every token (or sign-in) would fail later.
    expect(refusal({ SVC_JWT_JWKS_URL: 'https://user:pass@idp.example.com/jwks' })).toBe(
      'SVC_JWT_JWKS_URL must not hold a user name or password, got "https://user:pass@idp.example.com/jwks"',
    );
    const oidc = (issuer: string) => refusal({ SVC_OIDC_ISSUER: issuer, SVC_OIDC_CLIENT_ID: 'x' });
    expect(oidc('https://user@idp.example.com')).toBe(
      'SVC_OIDC_ISSUER must not hold a user name or password, got "https://user@idp.example.com"',
    );
    // An issuer has no query or fragment (OpenID Connect Discovery §3): the provider's never equals it.
    for (const issuer of [
      'https://idp.example.com/?tenant=a',
      'https://idp.example.com#x',
      'https://idp.example.com?',
    ]) {
      expect(oidc(issuer), issuer).toBe(`SVC_OIDC_ISSUER must not have a query or fragment, got "${issuer}"`);
    }
    expect(oidc('https://idp.example.com/realms/a')).toBeNull();
    expect(loadConfig({ SVC_JWT_JWKS_URL: 'https://idp.example.com/jwks?tenant=a', ...AUD }).jwtJwksUrl).toBe(
      'https://idp.example.com/jwks?tenant=a',
    );
  });

  it('takes SVC_JWT_JWKS_URL over https, or http on this machine, as SVC_OIDC_ISSUER', () => {
    expect(refusal({ SVC_JWT_JWKS_URL: 'ftp://idp.example.com/jwks' })).toMatch(
      /^SVC_JWT_JWKS_URL must use https \(http only for a provider on localhost\)/,
    );
    expect(refusal({ SVC_JWT_JWKS_URL: 'http://idp.example.com/jwks' })).toMatch(
      /^SVC_JWT_JWKS_URL must use https/,
    );
    expect(refusal({ SVC_JWT_JWKS_URL: 'not-a-url' })).toBe(
      'SVC_JWT_JWKS_URL must be a URL, got "not-a-url"',
    );
    for (const v of ['https://idp.example.com/jwks', 'http://127.0.0.1:4000/jwks', 'http://localhost/jwks']) {
      expect(loadConfig({ SVC_JWT_JWKS_URL: v, ...AUD }).jwtJwksUrl).toBe(v);
    }
  });

  it("refuses SVC_JWT_JWKS_URL without SVC_JWT_AUDIENCE: another application's tokens would pass", () => {
    for (const audience of [{}, { SVC_JWT_AUDIENCE: '' }, { SVC_JWT_AUDIENCE: '  ' }] as Record<
      string,
      string
    >[]) {
      expect(refusal({ SVC_JWT_JWKS_URL: 'https://idp.example.com/jwks', ...audience })).toMatch(
        /^SVC_JWT_JWKS_URL needs SVC_JWT_AUDIENCE: an identity provider signs the tokens of every application/,
      );
    }
  });

  it('takes SVC_ADMIN_REFUSALS_PER_MINUTE as a whole number from 1, default 10', () => {
    expect(loadConfig({}).adminRefusalsPerMinute).toBe(10);
    expect(loadConfig({ SVC_ADMIN_REFUSALS_PER_MINUTE: '50' }).adminRefusalsPerMinute).toBe(50);
    for (const v of ['0', '-1', '1.5', 'ten', '2000000']) {
      expect(refusal({ SVC_ADMIN_REFUSALS_PER_MINUTE: v }), v).toBe(
        `SVC_ADMIN_REFUSALS_PER_MINUTE must be a whole number 1-1000000, got "${v}"`,
      );
    }
  });

  it('requires SVC_ADMIN_TOKEN to be at least 16 characters', () => {
    expect(refusal({ SVC_ADMIN_TOKEN: 'change-me' })).toBe(
      'SVC_ADMIN_TOKEN must be at least 16 characters (e.g. openssl rand -hex 16), got 9',
    );
    expect(refusal({ SVC_ADMIN_TOKEN: 'x'.repeat(15) })).toMatch(/got 15$/);
    expect(loadConfig({ SVC_ADMIN_TOKEN: 'x'.repeat(16) }).adminToken).toBe('x'.repeat(16));
    expect(loadConfig({}).adminToken).toBeNull();
  });

  it('requires SVC_JWT_SECRET to be at least 32 bytes (RFC 7518 §3.2)', () => {
    expect(refusal({ SVC_JWT_SECRET: 'a' })).toMatch(/^SVC_JWT_SECRET must be at least 32 bytes .*got 1$/);
    expect(refusal({ SVC_JWT_SECRET: 'x'.repeat(31) })).toMatch(/got 31$/);
    // Bytes, not characters: the secret's UTF-8 encoding is the key (lib/jwt.ts).
    expect(refusal({ SVC_JWT_SECRET: 'é'.repeat(15) })).toMatch(/got 30$/);
    expect(loadConfig({ SVC_JWT_SECRET: 'é'.repeat(16) }).jwtSecret).toBe('é'.repeat(16));
    expect(loadConfig({ SVC_JWT_SECRET: 'x'.repeat(32) }).jwtSecret).toBe('x'.repeat(32));
    // What the tests use, and what is generated when it is unset (lib/jwt.ts), both qualify.
    expect(loadConfig({ SVC_JWT_SECRET: JWT_SECRET }).jwtSecret).toBe(JWT_SECRET);
    const generated = randomBytes(32).toString('base64url');
    expect(loadConfig({ SVC_JWT_SECRET: generated }).jwtSecret).toBe(generated);
  });

  it('takes SVC_PROVIDER_CREDENTIALS_KEY as exactly 64 hex digits or strict base64 of 32 bytes', () => {
    const hex = 'fbefbeffffff060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f';
    const key = Buffer.from(hex, 'hex');
    const base64 = '++++////BgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=';
    const base64url = '----____BgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8';
    for (const v of [hex, hex.toUpperCase(), base64, base64.slice(0, -1), base64url, `${base64url}=`]) {
      expect(loadConfig({ SVC_PROVIDER_CREDENTIALS_KEY: v }).providerCredentialsKey, v).toEqual(key);
    }
    expect(loadConfig({}).providerCredentialsKey).toBeNull();
    // Each of these decoded to the same key: Buffer.from(v, 'base64') skips what it does not know.
    for (const v of [
      `$${base64}`,
      '++++////BgcICQoLDA0O$DxAREhMUFRYXGBkaGxwdHh8=',
      '++++////BgcICQoLDA0O DxAREhMUFRYXGBkaGxwdHh8=',
      // Both alphabets at once; padding past the last group; unused bits set.
      '--++////BgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=',
      `${base64}=`,
      '++++////BgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=',
    ]) {
      expect(refusal({ SVC_PROVIDER_CREDENTIALS_KEY: v }), v).toBe(
        'SVC_PROVIDER_CREDENTIALS_KEY must be 32 bytes, as 64 hex digits or base64 ' +
          '(e.g. openssl rand -base64 32), got text that is neither 64 hex digits nor base64',
      );
    }
    // Valid base64 of another length, 48 hex digits (base64 of 36 bytes): the count, never the value.
    expect(refusal({ SVC_PROVIDER_CREDENTIALS_KEY: randomBytes(31).toString('base64') })).toMatch(
      /, got 31 bytes$/,
    );
    expect(refusal({ SVC_PROVIDER_CREDENTIALS_KEY: hex.slice(0, 48) })).toMatch(/, got 36 bytes$/);
  });

  it('takes SVC_LOG_LEVEL from the known levels, naming the variable otherwise', () => {
    expect(refusal({ SVC_LOG_LEVEL: 'verbose' })).toBe(
      'SVC_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"',
    );
    for (const level of LOG_LEVELS) expect(loadConfig({ SVC_LOG_LEVEL: level }).logLevel).toBe(level);
    expect(loadConfig({ SVC_LOG_LEVEL: 'DEBUG' }).logLevel).toBe('debug');
    expect(loadConfig({}).logLevel).toBe('info');
  });
});
