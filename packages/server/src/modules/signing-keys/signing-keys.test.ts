import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { ADMIN_TOKEN, bearer, createTenant, createTestApp, withTestApp } from '../../../test/helpers.js';

const t = useTestApp();

const jwks = () => t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' });

describe('GET /.well-known/svc-keys.json', () => {
  it('publishes the Ed25519 key set without authentication', async () => {
    const res = await jwks();
    expect(res.statusCode).toBe(200);
    expect(res.headers['cache-control']).toBe('public, max-age=300');
    const { keys } = res.json();
    expect(keys).toHaveLength(1);
    expect(keys[0]).toEqual({
      kty: 'OKP',
      crv: 'Ed25519',
      x: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      kid: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      alg: 'EdDSA',
      use: 'sig',
    });
    expect(JSON.stringify(keys[0])).not.toContain('"d"');
  });

  it('answers every other method, and bad requests, in envelope B', async () => {
    const methods = ['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'PROPFIND'] as const;
    for (const method of methods) {
      const res = await t.inject({ method: method as 'POST', url: '/.well-known/svc-keys.json' });
      expect([method, res.statusCode]).toEqual([method, 404]);
      expect(res.json()).toEqual({
        error: {
          type: 'invalid_request',
          code: 'route_not_found',
          message: `Route ${method} /.well-known/svc-keys.json not found`,
          param: null,
          doc_url: `${t.config.docsUrl}/errors/route_not_found`,
          hint: null,
          request_id: res.headers['x-request-id'],
        },
      });
    }
    const nul = await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json?x=%00' });
    expect(nul.statusCode).toBe(400);
    expect(nul.json().error).toMatchObject({ type: 'invalid_request', code: 'invalid_request' });
    expect(nul.json().error.doc_url).toBe(`${t.config.docsUrl}/errors/invalid_request`);
    // HEAD is served with GET; the rest of the API keeps envelope A.
    expect((await t.inject({ method: 'HEAD', url: '/.well-known/svc-keys.json' })).statusCode).toBe(200);
    for (const url of ['/.well-known/other.json', '/.well-known/svc-keys.json/x']) {
      const elsewhere = await t.inject({ method: 'POST', url });
      expect(elsewhere.statusCode).toBe(404);
      expect(elsewhere.json()).toEqual({ error: { code: 'not_found', message: expect.any(String) } });
    }
    // A path below the key set is refused for its %00 in envelope A too.
    const below = await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json/%00' });
    expect(below.statusCode).toBe(400);
    expect(below.json()).toEqual({
      error: { code: 'validation_failed', message: expect.stringContaining('%00') },
    });
  });
});

describe('operator key rotation', () => {
  it('rotates through the admin API: new key first, previous still published', async () => {
    const before = (await jwks()).json().keys[0].kid;
    const res = await t.inject({
      method: 'POST',
      url: '/v1/admin/signing-keys/rotate',
      headers: bearer(ADMIN_TOKEN),
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ previousKid: before, previousPublishedUntil: expect.any(String) });
    const kids = (await jwks()).json().keys.map((k: { kid: string }) => k.kid);
    expect(kids).toEqual([res.json().kid, before]);
    const list = await t.inject({
      method: 'GET',
      url: '/v1/admin/signing-keys',
      headers: bearer(ADMIN_TOKEN),
    });
    expect(list.json().data.map((k: { status: string }) => k.status)).toEqual(['active', 'retired']);
  });

  it('refuses without the admin token (users and API keys included)', async () => {
    const tenant = await createTenant(t);
    for (const headers of [{}, bearer(tenant.token), { 'x-service-api-key': tenant.apiKey }]) {
      const res = await t.inject({ method: 'POST', url: '/v1/admin/signing-keys/rotate', headers });
      expect(res.statusCode).toBe(401);
      expect(res.json().error.code).toBe('unauthorized');
    }
  });
});

describe('operator-supplied key file', () => {
  it('answers 503 signing_key_missing in envelope B while the file cannot be read', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-keyfile-'));
    try {
      await withTestApp({ signingKeyFile: join(dir, 'missing.jwk') }, async (app) => {
        const res = await app.inject({ method: 'GET', url: '/.well-known/svc-keys.json' });
        expect(res.statusCode).toBe(503);
        expect(res.json()).toEqual({
          error: {
            type: 'api_error',
            code: 'signing_key_missing',
            message: expect.any(String),
            param: null,
            doc_url: `${app.config.docsUrl}/errors/signing_key_missing`,
            hint: expect.any(String),
            request_id: res.headers['x-request-id'],
          },
        });
        const rotate = await app.inject({
          method: 'POST',
          url: '/v1/admin/signing-keys/rotate',
          headers: bearer(ADMIN_TOKEN),
        });
        expect(rotate.statusCode).toBe(409);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses to start when the key file is readable by others', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-keyfile-'));
    const file = join(dir, 'key.jwk');
    const { generateKeyPairSync } = await import('node:crypto');
    writeFileSync(file, JSON.stringify(generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' })), {
      mode: 0o644,
    });
    try {
      await expect(createTestApp({ signingKeyFile: file })).rejects.toThrow(/readable by group or others/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('one key set per database', () => {
  const a = useTestApp();
  const b = useTestApp({}, () => ({ database: a.database }));

  it('two instances on one store publish and sign with the same key', async () => {
    const ka = (await a.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json();
    const kb = (await b.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json();
    expect(ka).toEqual(kb);
    const data = new TextEncoder().encode('x');
    expect(await b.ctx.signing.verify(data, await a.ctx.signing.sign(data))).toBe(true);
  });
});
