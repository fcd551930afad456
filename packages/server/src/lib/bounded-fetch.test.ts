import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundedFetch, ResponseRefused } from './bounded-fetch.js';

/** A server whose answers the tests pick by path; it records what it received and what it sent. */
let server: Server;
let base: string;
const received: { method: string; url: string; body: string; headers: IncomingMessage['headers'] }[] = [];
let sentBytes = 0;
const LIMIT = 1024;

const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/small': (_req, res) =>
    res.writeHead(200, { 'content-type': 'application/json', 'x-extra': 'kept' }).end('{"ok":true}'),
  '/exact': (_req, res) => res.writeHead(200).end('a'.repeat(LIMIT)),
  '/declared': (_req, res) => {
    res.writeHead(200, { 'content-length': String(100 * 1024 * 1024) });
    res.write('a'.repeat(100));
  },
  '/chunked': (_req, res) => {
    // Endless: only the client stopping ends it.
    res.writeHead(200);
    const pump = () => {
      while (!res.destroyed && res.write('a'.repeat(16 * 1024))) sentBytes += 16 * 1024;
      if (!res.destroyed) res.once('drain', pump);
    };
    pump();
  },
  '/gzip-bomb': (_req, res) => {
    const bomb = gzipSync(Buffer.alloc(10 * 1024 * 1024));
    res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': String(bomb.length) }).end(bomb);
  },
  '/error': (_req, res) =>
    res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"invalid_grant"}'),
  '/empty': (_req, res) => res.writeHead(204).end(),
  '/stall': (_req, res) => {
    res.writeHead(200);
    res.write('{"a":');
  },
  '/reset': (_req, res) => {
    res.writeHead(200);
    res.write('{"a":', () => res.socket?.destroy());
  },
  '/target': (_req, res) => res.writeHead(200).end('followed'),
};

beforeAll(async () => {
  server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const url = req.url ?? '/';
    received.push({ method: req.method ?? '', url, body, headers: req.headers });
    const redirect = /^\/redirect\/(\d+)$/.exec(url);
    if (redirect) {
      res.writeHead(Number(redirect[1]), { location: `http://localhost:${port()}/target` }).end();
      return;
    }
    (routes[url] ?? ((_q, r: ServerResponse) => r.writeHead(404).end()))(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${port()}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
});
const port = () => (server.address() as AddressInfo).port;

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (err: unknown) => (err instanceof ResponseRefused ? err.reason : err),
  );

describe('boundedFetch', () => {
  it('answers a standard Response read in full, with the status, headers and url', async () => {
    const res = await boundedFetch(`${base}/small`, undefined, { maxBytes: LIMIT });
    expect(res).toBeInstanceOf(Response);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-extra')).toBe('kept');
    expect(res.url).toBe(`${base}/small`);
    expect(await res.json()).toEqual({ ok: true });

    // An error status is an answer like any other: the caller reads its body (e.g. an OAuth error).
    const error = await boundedFetch(`${base}/error`, undefined, { maxBytes: LIMIT });
    expect(error.status).toBe(400);
    expect(await error.json()).toEqual({ error: 'invalid_grant' });
    const empty = await boundedFetch(`${base}/empty`, undefined, { maxBytes: LIMIT });
    expect(empty.status).toBe(204);
    expect(empty.body).toBeNull();
  });

  it('sends the request as given: method, headers and body', async () => {
    received.length = 0;
    await boundedFetch(
      new URL(`${base}/small`),
      { method: 'POST', headers: { authorization: 'Basic abc' }, body: new URLSearchParams({ code: 'c' }) },
      { maxBytes: LIMIT },
    );
    expect(received[0]).toMatchObject({
      method: 'POST',
      body: 'code=c',
      headers: { authorization: 'Basic abc' },
    });
  });

  it('accepts a body of exactly maxBytes and refuses one byte more', async () => {
    const res = await boundedFetch(`${base}/exact`, undefined, { maxBytes: LIMIT });
    expect((await res.text()).length).toBe(LIMIT);
    expect(await refusal(boundedFetch(`${base}/exact`, undefined, { maxBytes: LIMIT - 1 }))).toBe(
      'too_large',
    );
  });

  it('refuses a larger body without reading it: announced, streamed, or compressed', async () => {
    expect(await refusal(boundedFetch(`${base}/declared`, undefined, { maxBytes: LIMIT }))).toBe('too_large');

    sentBytes = 0;
    expect(await refusal(boundedFetch(`${base}/chunked`, undefined, { maxBytes: 64 * 1024 }))).toBe(
      'too_large',
    );
    // The server was stopped by back-pressure, far short of what it would have sent.
    expect(sentBytes).toBeLessThan(8 * 1024 * 1024);

    // 10 MiB of zeros in a few KiB of gzip: counted as decoded.
    const err = await boundedFetch(`${base}/gzip-bomb`, undefined, { maxBytes: 1024 * 1024 }).catch((e) => e);
    expect(err).toBeInstanceOf(ResponseRefused);
    expect((err as Error).message).toBe(`the answer from ${base} is larger than 1048576 bytes`);
  });

  it.each([301, 302, 303, 307, 308])(
    'never follows a %i redirect, whatever init.redirect says',
    async (status) => {
      received.length = 0;
      const err = await boundedFetch(
        `${base}/redirect/${status}`,
        { redirect: 'follow' },
        { maxBytes: LIMIT },
      ).catch((e) => e);
      expect(err).toBeInstanceOf(ResponseRefused);
      expect((err as ResponseRefused).reason).toBe('redirect');
      expect((err as Error).message).toContain(`redirecting to http://localhost:${port()}/target`);
      expect(received.map((r) => r.url)).toEqual([`/redirect/${status}`]);
    },
  );

  it('rejects as fetch does when the body stalls past the signal or the connection is reset', async () => {
    const stalled = await boundedFetch(
      `${base}/stall`,
      { signal: AbortSignal.timeout(300) },
      { maxBytes: LIMIT },
    ).catch((e) => e);
    expect(stalled).toBeInstanceOf(DOMException);
    expect((stalled as DOMException).name).toBe('TimeoutError');

    const reset = await boundedFetch(`${base}/reset`, undefined, { maxBytes: LIMIT }).catch((e) => e);
    expect(reset).toBeInstanceOf(TypeError);
    expect((reset as Error).message).toBe('terminated');
  });
});
