import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import {
  asUser,
  bearer,
  createTenant,
  expectError,
  JWT_SECRET,
  keyHeader,
  withTestApp,
} from '../../test/helpers.js';
import { StoreUnavailableError } from '../storage/db.js';

const t = useTestApp();

describe('envelope A on every error', () => {
  it('answers unknown routes with 404 not_found, whatever the credentials', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/nothing-here' }), 404, 'not_found');
    expectError(
      await t.inject({ method: 'DELETE', url: '/nope', headers: keyHeader('svc_bad') }),
      404,
      'not_found',
    );
  });

  it('answers malformed JSON with 400 invalid_json and changes nothing', async () => {
    const token = await t.token('json');
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: { ...bearer(token), 'content-type': 'application/json' },
      payload: '{"name": "x", "slug": ',
    });
    expectError(res, 400, 'invalid_json');
    const list = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
    expect(list.json().data).toEqual([]);
  });

  it('answers 503 service_unavailable, not 500, while the store is not answering', async () => {
    const token = await t.token('away');
    const away = vi.spyOn(t.store.db, 'selectFrom').mockImplementation(() => {
      throw new StoreUnavailableError('the database did not answer within 6000 ms');
    });
    try {
      const res = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
      expectError(res, 503, 'service_unavailable');
      expect(res.json().error.message).toBe('The store is not answering; retry');
    } finally {
      away.mockRestore();
    }
  });

  it('answers 503, not 500, while the SQLite file cannot be written (a full disk, the lock held, I/O)', async () => {
    const token = await t.token('full');
    for (const code of ['SQLITE_FULL', 'SQLITE_BUSY', 'SQLITE_IOERR_WRITE', 'SQLITE_READONLY']) {
      const full = vi.spyOn(t.store.db, 'selectFrom').mockImplementation(() => {
        throw Object.assign(new Error('database or disk is full'), { code });
      });
      try {
        const res = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
        expectError(res, 503, 'service_unavailable');
      } finally {
        full.mockRestore();
      }
    }
  });

  it('answers 503 in envelope B on the payment gateway while the store is not answering', async () => {
    const tenant = await createTenant(t);
    const away = vi.spyOn(t.store.db, 'selectFrom').mockImplementation(() => {
      throw Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
    });
    try {
      const res = await t.inject({
        method: 'PUT',
        url: '/v1/gateway/packs/p',
        headers: asUser(tenant),
        payload: { allowed_rails: ['ach'], approval_threshold_usd: '100', quarantine_seconds: 0 },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json().error).toMatchObject({ type: 'api_error', code: 'service_unavailable' });
    } finally {
      away.mockRestore();
    }
  });

  it('refuses ids in upper case, which would name nothing, and reads X-Organization-Id in any case', async () => {
    const tenant = await createTenant(t);
    const upper = tenant.projectId.toUpperCase();
    for (const url of [`/v1/decisions/${upper}`, `/v1/decisions?projectId=${upper}`]) {
      const res = await t.inject({ method: 'GET', url, headers: asUser(tenant) });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toContain('must be written in lower case');
    }
    const bad = await t.inject({ method: 'GET', url: '/v1/decisions/not-an-id', headers: asUser(tenant) });
    expect(bad.json().error.message).toContain('must be a UUID');
    const listed = await t.inject({
      method: 'GET',
      url: '/v1/decisions',
      headers: { ...asUser(tenant), 'x-organization-id': tenant.orgId.toUpperCase() },
    });
    expect(listed.statusCode).toBe(200);
    // So is an organizationId field that no schema checks as a UUID, with a user token or a key.
    for (const headers of [{ authorization: `Bearer ${tenant.token}` }, keyHeader(tenant.apiKey)]) {
      const projects = await t.inject({
        method: 'GET',
        url: `/v1/projects?organizationId=${tenant.orgId.toUpperCase()}`,
        headers,
      });
      expect(projects.statusCode, projects.body).toBe(200);
    }
  });

  it('answers a wrong content type with 415', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: { ...bearer(await t.token('ct')), 'content-type': 'text/plain' },
      payload: 'name=x',
    });
    expectError(res, 415, 'unsupported_media_type');
  });

  it('answers bodies over 1 MB with 413', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: { ...bearer(await t.token('big')), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x', slug: 'y', pad: 'a'.repeat(1024 * 1024) }),
    });
    expectError(res, 413, 'payload_too_large');
  });

  it('answers a JSON body that is not an object with 400 validation_failed', async () => {
    for (const payload of ['[]', '"text"', '42', 'null']) {
      const res = await t.inject({
        method: 'POST',
        url: '/v1/organizations',
        headers: { ...bearer(await t.token('shape')), 'content-type': 'application/json' },
        payload,
      });
      expectError(res, 400, 'validation_failed');
    }
  });

  it('treats an empty JSON body on a body-less POST as no body', async () => {
    const tenant = await createTenant(t);
    const [key] = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    const extra = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'x', projectId: tenant.projectId },
    });
    const res = await t.inject({
      method: 'POST',
      url: `/v1/api-keys/${extra.json().id}/revoke`,
      headers: { ...keyHeader(tenant.apiKey), 'content-type': 'application/json' },
      payload: '',
    });
    expect(res.statusCode).toBe(200);
    expect(key.isRevoked).toBe(false);
  });

  it('answers missing credentials with 401 unauthorized and bad tokens with 401', async () => {
    expectError(await t.inject({ method: 'GET', url: '/v1/organizations' }), 401, 'unauthorized');
    expectError(
      await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer('not-a-jwt') }),
      401,
      'unauthorized',
    );
    expectError(
      await t.inject({ method: 'GET', url: '/v1/organizations', headers: keyHeader('svc_nope') }),
      401,
      'invalid_api_key',
    );
    const foreign = await (async () => {
      const { SignJWT } = await import('jose');
      return new SignJWT({ sub: 'eve' })
        .setProtectedHeader({ alg: 'HS256' })
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode('other-secret-other-secret-other-secret'));
    })();
    expectError(
      await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(foreign) }),
      401,
      'unauthorized',
    );
    // A validly signed token whose sub could not be stored as a person's id (U+0000 never reaches
    // PostgreSQL) or is over 200 characters names nobody, and creates nothing.
    for (const sub of ['eve\u0000x', 'eve\nx', 'e'.repeat(201), '   ']) {
      const res = await t.inject({
        method: 'POST',
        url: '/v1/organizations',
        headers: bearer(await t.token(sub)),
        payload: { name: 'Acme', slug: `acme-${Math.random().toString(36).slice(2, 10)}` },
      });
      expectError(res, 401, 'unauthorized');
      expect(res.json().error.message).toContain('sub');
    }
    // Signed with the service's own secret, but without an expiry: nothing could ever revoke it.
    const forever = await (async () => {
      const { SignJWT } = await import('jose');
      return new SignJWT({ sub: 'eve' })
        .setProtectedHeader({ alg: 'HS256' })
        .sign(new TextEncoder().encode(JWT_SECRET));
    })();
    const noExp = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(forever) });
    expectError(noExp, 401, 'unauthorized');
    expect(noExp.json().error.message).toContain('exp');
    expect(
      (
        await t.inject({
          method: 'GET',
          url: '/v1/organizations',
          headers: bearer(await t.token('e'.repeat(200))),
        })
      ).statusCode,
    ).toBe(200);
  });

  it('returns a request id on every response', async () => {
    const res = await t.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'abc-123' } });
    expect(res.headers['x-request-id']).toBe('abc-123');
    const other = await t.inject({ method: 'GET', url: '/nope' });
    expect(other.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('health', () => {
  it('serves /healthz and /readyz without credentials', async () => {
    expect((await t.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    expect((await t.inject({ method: 'GET', url: '/readyz' })).json()).toEqual({ status: 'ready' });
  });
});

describe('readiness', () => {
  it('answers /readyz 503 once the store stops answering, while /healthz stays 200', async () => {
    await withTestApp({}, async (own) => {
      await own.store.db.destroy();
      expectError(await own.inject({ method: 'GET', url: '/readyz' }), 503, 'service_unavailable');
      expect((await own.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    });
  });
});

describe('JWT issuer and audience', () => {
  it('verifies iss and aud when configured', async () => {
    await withTestApp({ jwtIssuer: 'https://auth.example', jwtAudience: 'svc-api' }, async (strict) => {
      const good = await strict.token('u1');
      expect(
        (await strict.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(good) })).statusCode,
      ).toBe(200);
      const wrongAud = await t.token('u1'); // no iss/aud
      expectError(
        await strict.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(wrongAud) }),
        401,
        'unauthorized',
      );
    });
  });
});
