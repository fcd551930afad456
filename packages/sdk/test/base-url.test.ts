import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError, createClient, FlushError, SvcError } from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../server/test/helpers.js';
import { createTenant, putPolicy, startServer } from './live.js';

let t: TestApp;
let baseUrl: string;
beforeAll(async () => {
  ({ t, baseUrl } = await startServer());
});
afterAll(async () => t.close());

const PAY = { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] };

describe('a base URL that is not the service root', () => {
  it('never allows: with an extra /v1 every call throws an ApiError naming the URL, whatever the key', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', PAY);
    for (const apiKey of [tenant.apiKey, `svc_${'x'.repeat(43)}`]) {
      const client = createClient({ apiKey, baseUrl: `${baseUrl}/v1`, live: false, closeTimeoutMs: 200 });
      // The service's 404 for an unknown route is `not_found` too: it is not "this tool has no policy".
      for (const tool of ['pay', 'unknown_tool']) {
        const r = await client.validate(tool, { amount: 1_000_000 }).catch((e: unknown) => e);
        expect(r, tool).toBeInstanceOf(ApiError);
        expect((r as ApiError).status).toBe(404);
        expect((r as ApiError).message).toContain(`${baseUrl}/v1/v1/`);
        expect((r as ApiError).message).toContain('baseUrl');
      }
      let ran = false;
      await client
        .wrap('pay', async (_args: { amount: number }) => {
          ran = true;
        })({ amount: 1_000_000 })
        .catch(() => {});
      expect(ran).toBe(false);
      // Nothing was answered locally, so nothing waits to be recorded.
      await client.close();
    }
  });

  it('reads a 404 as "no policy" only with the policy route’s marker; any other goes to the service', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', PAY);
    // A proxy in front of the service answers policy reads with a 404 in the API's own envelope.
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl,
      live: false,
      fetch: async (input, init) => {
        if (String(input).includes('/v1/policies/')) {
          return new Response(JSON.stringify({ error: { code: 'not_found', message: 'nope' } }), {
            status: 404,
            headers: { 'content-type': 'application/json' },
          });
        }
        return fetch(input, init);
      },
    });
    expect(await client.validate('pay', { amount: 1_000_000 })).toMatchObject({
      decision: 'deny',
      source: 'server',
    });
    expect(await client.validate('unknown_tool', {})).toMatchObject({ decision: 'allow', source: 'server' });
    await client.close();

    // The service's own answer for a tool without a policy carries it: allowed here, as before.
    const direct = createClient({ apiKey: tenant.apiKey, baseUrl, live: false });
    expect(await direct.validate('unknown_tool', {})).toMatchObject({ decision: 'allow', source: 'local' });
    expect(await direct.validate('pay', { amount: 1_000_000 })).toMatchObject({
      decision: 'deny',
      source: 'local',
    });
    await direct.close();
  });

  it('a decision log sent to a path the service does not have is reported once and not retried', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', PAY);
    const errors: Error[] = [];
    let posts = 0;
    // A proxy that routes everything but the decision log to the service.
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl,
      live: false,
      log: { flushIntervalMs: 10 },
      closeTimeoutMs: 10_000,
      onError: (e) => errors.push(e),
      fetch: async (input, init) => {
        const url = String(input);
        if (url.endsWith('/v1/decisions') && init?.method === 'POST') {
          posts++;
          return fetch(url.replace('/v1/decisions', '/v1/v1/decisions'), init);
        }
        return fetch(input, init);
      },
    });
    expect(await client.validate('pay', { amount: 1 })).toMatchObject({ decision: 'allow', source: 'local' });
    const flushed = Promise.race([client.flush(), new Promise((r) => setTimeout(r, 3000, 'still waiting'))]);
    await expect(flushed).rejects.toMatchObject({ status: 404 });
    await new Promise((r) => setTimeout(r, 700));
    expect(posts).toBe(1);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(ApiError);
    expect(errors[0]!.message).toContain(`POST ${baseUrl}/v1/decisions`);
    // No local answer could be recorded: calls are decided (and recorded) by the service.
    expect(await client.validate('pay', { amount: 2 })).toMatchObject({
      decision: 'allow',
      source: 'server',
    });
    // close() hands the decision back at once rather than trying for closeTimeoutMs.
    const started = performance.now();
    const closing = await client.close().catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(closing).toBeInstanceOf(FlushError);
    expect((closing as FlushError).pending).toHaveLength(1);
    expect((closing as FlushError).message).toContain('/v1/decisions');
  });
});

/** A plain HTTP server answering every request with `answer`; it keeps the headers it was sent. */
async function listen(answer: (res: import('node:http').ServerResponse) => void) {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    answer(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise<void>((r) => server.close(() => r())) };
}

describe('a base URL that answers with a redirect', () => {
  it('is never followed: the API key stays with baseUrl, every call throws, nothing is allowed', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', PAY);
    const elsewhere = await listen((res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
    );
    const redirecting = await listen((res) =>
      res.writeHead(307, { location: `${elsewhere.url}/v1/x` }).end(),
    );
    try {
      const errors: Error[] = [];
      const client = createClient({
        apiKey: tenant.apiKey,
        baseUrl: redirecting.url,
        live: false,
        closeTimeoutMs: 200,
        onError: (e) => errors.push(e),
      });
      const r = await client.validate('pay', { amount: 1 }).catch((e: unknown) => e);
      expect(r).toBeInstanceOf(ApiError);
      expect((r as ApiError).code).toBe('redirected');
      expect((r as ApiError).message).toContain(`redirect to ${elsewhere.url}/v1/x`);
      let ran = false;
      await client
        .wrap('pay', async (_args: { amount: number }) => {
          ran = true;
        })({ amount: 1 })
        .catch(() => {});
      expect(ran).toBe(false);
      await client.close().catch(() => {});
      expect(redirecting.seen.length).toBeGreaterThan(0);
      expect(redirecting.seen.every((h) => h['x-service-api-key'] === tenant.apiKey)).toBe(true);
      expect(elsewhere.seen).toEqual([]);
    } finally {
      await Promise.all([elsewhere.close(), redirecting.close()]);
    }
  });
});

describe('a base URL that is not an http: or https: URL', () => {
  it('is refused by createClient, before any request, rather than read as the service being down', () => {
    for (const bad of [
      'htps://svc.example.com',
      'http//127.0.0.1:8080',
      '127.0.0.1:8080',
      'localhost:8080',
      'svc.example.com',
      'undefined',
      'ftp://svc.example.com',
      'file:///srv/svc',
      // fetch refuses a URL with credentials; a query or fragment would swallow every route's path.
      'https://user:secret@svc.example.com',
      'https://svc.example.com/?region=eu',
      'https://svc.example.com/#v1',
      'https://svc.example.com/?',
      new URL('https://svc.example.com'),
    ]) {
      let requests = 0;
      const make = () =>
        createClient({
          apiKey: 'svc_x',
          baseUrl: bad as string,
          onUnavailable: 'allow',
          fetch: async () => {
            requests++;
            return new Response('{}');
          },
        });
      expect(make, String(bad)).toThrow(SvcError);
      expect(make, String(bad)).toThrow(/^baseUrl must be/);
      expect(requests).toBe(0);
    }
  });

  it('takes the service root in any form a URL parser reads the same, a path prefix included', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', PAY);
    const { port } = new URL(baseUrl);
    for (const base of [`${baseUrl}/`, `${baseUrl}//`, `HTTP://127.0.0.1:${port}`, ` ${baseUrl} `]) {
      const client = createClient({ apiKey: tenant.apiKey, baseUrl: base, live: false });
      // Allowed here by the policy fetched: a client that could not reach the service would deny.
      expect(await client.validate('pay', { amount: 1 }), base).toMatchObject({
        decision: 'allow',
        source: 'local',
      });
      await client.close();
    }
    const called: string[] = [];
    const prefixed = createClient({
      apiKey: tenant.apiKey,
      baseUrl: 'https://svc.example.com/svc/',
      live: false,
      fetch: async (input) => {
        called.push(String(input));
        return new Response('{}', { status: 503 });
      },
      maxRetries: 0,
      onUnavailable: 'throw',
    });
    await prefixed.validate('pay', {}).catch(() => {});
    expect(called[0]).toBe('https://svc.example.com/svc/v1/policies/pay');
    await prefixed.close();
  });
});
