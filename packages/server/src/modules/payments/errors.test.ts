import Fastify, { type InjectOptions } from 'fastify';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, gate, keyHeader } from '../../../test/helpers.js';
import { SigningKeyMissingError } from '../../signing/model.js';
import { registerEnvelopeB } from './errors.js';

const DOCS = 'https://docs.example/svc';

async function appWith(fail: () => never) {
  const app = Fastify({ logger: false, genReqId: () => 'req-42' });
  await app.register(
    async (scoped) => {
      registerEnvelopeB(scoped, DOCS);
      scoped.get('/boom', async () => fail());
    },
    { prefix: '/v1/gateway' },
  );
  return app;
}

describe('gateway error handler', () => {
  it('answers an unhandled exception as internal_server_error naming the request', async () => {
    const app = await appWith(() => {
      throw new TypeError('bug');
    });
    const res = await app.inject({ method: 'GET', url: '/v1/gateway/boom' });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual({
      error: {
        type: 'api_error',
        code: 'internal_server_error',
        message: 'Internal error (request req-42)',
        param: null,
        doc_url: `${DOCS}/errors/internal_server_error`,
        hint: 'quote request_id when reporting it',
        request_id: 'req-42',
      },
    });
    await app.close();
  });

  it('answers a missing signing key as 503 signing_key_missing', async () => {
    const app = await appWith(() => {
      throw new SigningKeyMissingError();
    });
    const res = await app.inject({ method: 'GET', url: '/v1/gateway/boom' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.code).toBe('signing_key_missing');
    await app.close();
  });
});

describe('gateway writes whose organization is deleted while they run', () => {
  const t = useTestApp();

  it('answer 404 resource_not_found in envelope B, as the document lists, never 500', async () => {
    const tenant = await createTenant(t);
    const key = keyHeader(tenant.apiKey);
    const payee = (name: string) => ({
      details: { name, account_number: 'DE89370400440532013000', country: 'DE' },
    });
    const writes: (InjectOptions & { url: string })[] = [
      { method: 'POST', url: '/v1/gateway/payees', headers: key, payload: payee('Acme') },
      // The Idempotency-Key's claim is taken before the organization goes, the payee after.
      {
        method: 'POST',
        url: '/v1/gateway/payees',
        headers: { ...key, 'idempotency-key': 'late-payee' },
        payload: payee('Initech'),
      },
      {
        method: 'PUT',
        url: '/v1/gateway/packs/late',
        headers: asUser(tenant),
        payload: { allowed_rails: ['ach'], quarantine_seconds: 0 },
      },
      {
        method: 'POST',
        url: '/v1/gateway/providers',
        headers: asUser(tenant),
        payload: { name: 'late', rail: 'ach', url: 'https://pay.example.com/v1/payments' },
      },
    ];
    // Each request waits, its access checked, until the organization is deleted.
    const ctx = t.ctx;
    const scope = ctx.scope;
    const held = gate();
    let arrived = 0;
    ctx.scope = async (req, explicit) => {
      const s = await scope(req, explicit);
      arrived++;
      await held.opened;
      return s;
    };
    let answers: Awaited<ReturnType<typeof t.inject>>[];
    try {
      const pending = writes.map((w) => t.inject(w));
      while (arrived < writes.length) await new Promise((r) => setTimeout(r, 5));
      ctx.scope = scope;
      const del = await t.inject({
        method: 'DELETE',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: bearer(tenant.token),
      });
      expect(del.statusCode).toBe(200);
      held.open();
      answers = await Promise.all(pending);
    } finally {
      ctx.scope = scope;
      held.open();
    }
    const doc = (await t.inject({ method: 'GET', url: '/openapi.json' })).json();
    for (const [i, res] of answers.entries()) {
      const { method, url } = writes[i]!;
      expect([`${method} ${url}`, res.statusCode], res.body).toEqual([`${method} ${url}`, 404]);
      expect(res.json()).toEqual({
        error: {
          type: 'invalid_request',
          code: 'resource_not_found',
          message: 'What this request refers to was deleted meanwhile',
          param: null,
          doc_url: `${t.config.docsUrl}/errors/resource_not_found`,
          hint: expect.any(String),
          request_id: res.headers['x-request-id'],
        },
      });
      const path = url === '/v1/gateway/packs/late' ? '/v1/gateway/packs/{packId}' : url;
      const listed =
        doc.paths[path][String(method).toLowerCase()].responses['404'].content['application/json'].schema
          .properties.error.properties.code.enum;
      expect(listed, `${method} ${path}`).toContain('resource_not_found');
    }
  });
});
