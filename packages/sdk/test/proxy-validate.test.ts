import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError, type ClientOptions, createClient, ServiceUnavailableError } from '@svc/sdk';
import { afterEach, describe, expect, it } from 'vitest';

/**
 * A proxy in front of the service that answers every request itself, as a proxy or load balancer
 * does when it refuses one (a body over its own limit, a WAF rule, its own authentication): with
 * `status` and `body` of type `type`. It counts the POST /v1/tools/validate requests it got.
 */
async function proxy(status: number, body: string, type = 'text/html') {
  let validates = 0;
  const server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/v1/tools/validate') validates++;
    req.resume();
    res.writeHead(status, { 'content-type': type }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = () =>
    new Promise<void>((r) => {
      server.close(() => r());
      server.closeAllConnections();
    });
  return { url, validates: () => validates, close };
}

const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await Promise.allSettled(closers.splice(0).map((c) => c()));
});

async function clientBehind(
  status: number,
  body: string,
  options: Partial<ClientOptions> = {},
  type?: string,
) {
  const p = await proxy(status, body, type);
  const errors: Error[] = [];
  const client = createClient({
    apiKey: 'svc_x',
    baseUrl: p.url,
    live: false,
    closeTimeoutMs: 50,
    onError: (e) => errors.push(e),
    ...options,
  });
  // The log cannot reach the service either: close() hands its decisions back.
  closers.push(() => client.close().catch(() => {}), p.close);
  return { client, errors, validates: p.validates };
}

/** A proxy's 4xx pages: they may depend on what the call holds (a body limit, a WAF rule). */
const REFUSALS: [number, string, string][] = [
  [413, '<html><body><h1>413 Request Entity Too Large</h1><hr>nginx</body></html>', 'text/html'],
  [400, '<html><body><h1>400 Bad Request</h1></body></html>', 'text/html'],
  [400, 'Bad Request', 'text/plain'],
  // JSON, but not the service's envelope.
  [413, '{"message":"Request Entity Too Large"}', 'application/json'],
  [403, '<html>Request blocked by the web application firewall</html>', 'text/html'],
  [401, '<html>Authorization Required</html>', 'text/html'],
];
/** A proxy's 5xx pages (not 502/503/504, which are retried): the service did not answer. */
const PAGES: [number, string, string][] = [
  [500, '<html>Internal Server Error</html>', 'text/html'],
  [500, '{"message":"upstream failed"}', 'application/json'],
  [501, 'Not Implemented', 'text/plain'],
];

describe("validate behind a proxy that answers an error page of its own (not the service's envelope)", () => {
  it.each(REFUSALS)(
    '%i %s: throws ApiError http_<status>, never the outage answer (which may allow), without retries',
    async (status, page, type) => {
      const { client, validates } = await clientBehind(
        status,
        page,
        { maxRetries: 2, onUnavailable: 'allow' },
        type,
      );
      const err = await client.validate('pay', { amount: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status, code: `http_${status}` });
      expect(validates()).toBe(1);
      let ran = false;
      await expect(
        client.wrap('pay', async (_args: { amount: number }) => {
          ran = true;
        })({ amount: 1 }),
      ).rejects.toBeInstanceOf(ApiError);
      expect(ran).toBe(false);
    },
  );

  it.each(PAGES)(
    '%i %s: fails closed by default, as the service being unreachable, without retries',
    async (status, page, type) => {
      const { client, errors, validates } = await clientBehind(status, page, { maxRetries: 2 }, type);
      const r = await client.validate('pay', { amount: 1 });
      expect(r).toMatchObject({
        decision: 'deny',
        source: 'local',
        reason: expect.stringMatching(/fail closed/),
      });
      // The same page would come back: asked once.
      expect(validates()).toBe(1);
      // Reported, naming what answered; the page is the cause.
      const reported = errors.find((e) => e instanceof ServiceUnavailableError);
      expect(reported?.message).toContain(
        `/v1/tools/validate answered ${status} without the service's error envelope`,
      );
      expect((reported as Error & { cause: unknown }).cause).toMatchObject({
        name: 'ApiError',
        code: `http_${status}`,
      });
      // A wrapped tool does not run.
      let ran = false;
      await expect(
        client.wrap('pay', async (_args: { amount: number }) => {
          ran = true;
        })({ amount: 1 }),
      ).rejects.toMatchObject({ name: 'DeniedError' });
      expect(ran).toBe(false);
    },
  );

  it('answers as onUnavailable says: throw throws ServiceUnavailableError, allow allows', async () => {
    const [status, page] = PAGES[0]!;
    const throwing = await clientBehind(status, page, { onUnavailable: 'throw' });
    const err = await throwing.client.validate('pay', { amount: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceUnavailableError);
    expect(err).not.toBeInstanceOf(ApiError);
    expect((err as Error).message).toContain('Internal Server Error');
    const open = await clientBehind(status, page, { onUnavailable: 'allow' });
    expect(await open.client.validate('pay', { amount: 1 })).toMatchObject({
      decision: 'allow',
      source: 'local',
      reason: expect.stringMatching(/fail open/),
    });
  });

  it('never allows a call the service itself would refuse, whatever onUnavailable says', async () => {
    // Over the service's 1 MiB body limit: no answer given here could be recorded.
    const [status, page] = PAGES[0]!;
    const { client } = await clientBehind(status, page, { onUnavailable: 'allow' });
    await expect(client.validate('pay', { amount: 1, blob: 'x'.repeat(1024 * 1024) })).rejects.toBeInstanceOf(
      ServiceUnavailableError,
    );
  });

  it("still throws the service's own refusal (its error envelope) as ApiError, whatever onUnavailable says", async () => {
    const envelope = JSON.stringify({ error: { code: 'validation_failed', message: 'body/arguments: bad' } });
    for (const status of [400, 413]) {
      const { client, validates } = await clientBehind(
        status,
        envelope,
        { onUnavailable: 'allow' },
        'application/json',
      );
      const err = await client.validate('pay', { amount: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status, code: 'validation_failed' });
      expect(validates()).toBe(1);
    }
  });
});
