import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
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
