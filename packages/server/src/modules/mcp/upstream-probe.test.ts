import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deepResult } from '../../../test/hostile-upstream.js';
import { createHttpFetch } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { probeUpstream } from './upstream-client.js';
import { UpstreamSession } from './upstream-session.js';

/**
 * POST /v1/mcp/upstreams/:id/test, and HTTP+SSE sessions, against an upstream whose answer never
 * ends: the answer is bounded like a session's (8 MiB), and at timeoutMs (or when the session
 * ends) every connection is closed, a body still coming included.
 */
const http = createHttpFetch({ allowPrivate: true });
let server: Server;
let base: string;
/** When the connection of the last answer closed (ms since it started), and what was written on it. */
let last: { started: number; closedAfter: number | null; written: number };
const STOP_WRITING = 64 * 1024 * 1024;

/** Writes `chunk` until the connection closes (at most STOP_WRITING bytes), every `everyMs` or as fast as it drains. */
function endless(res: ServerResponse, chunk: Buffer, everyMs: number | null) {
  const write = () => {
    if (res.destroyed || last.written >= STOP_WRITING) return;
    last.written += chunk.length;
    const more = res.write(chunk);
    if (everyMs !== null) setTimeout(write, everyMs);
    else if (more) setImmediate(write);
    else res.once('drain', write);
  };
  write();
}

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const watch = () => {
      last = { started: Date.now(), closedAfter: null, written: 0 };
      const mine = last;
      res.once('close', () => {
        mine.closedAfter = Date.now() - mine.started;
      });
    };
    req.resume();
    if (path === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: endpoint\ndata: /messages\n\n');
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    watch();
    if (path === '/endless') {
      res.writeHead(200, { 'content-type': 'application/json' });
      endless(res, Buffer.alloc(64 * 1024, 0x20), null);
    } else if (path === '/trickle') {
      res.writeHead(200, { 'content-type': 'application/json' });
      endless(res, Buffer.from(' '), 20);
    } else if (path === '/deep') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(deepResult(0, 4_000_000));
    } else if (path === '/messages') {
      // HTTP+SSE: a failed POST whose error text never ends.
      res.writeHead(500, { 'content-type': 'text/plain' });
      endless(res, Buffer.from('e'), 20);
    } else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  http.close();
});

const target = (path: string, timeoutMs = 1000) => ({
  id: 'u1',
  transport: 'mcp-streamable-http' as const,
  url: `${base}${path}`,
  headers: {},
  timeoutMs,
});

/** Waits for the last answer's connection to close, up to `ms`; its time since it started, or null. */
async function closedWithin(ms: number): Promise<number | null> {
  const deadline = Date.now() + ms;
  while (last.closedAfter === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return last.closedAfter;
}

describe('POST /v1/mcp/upstreams/:id/test on an answer that never ends', () => {
  it('stops reading at the 8 MiB message bound', async () => {
    const result = await probeUpstream(target('/endless'), { allowPrivate: true, fetch: http.fetch });
    expect(result).toMatchObject({ ok: false, message: expect.stringMatching(/^initialize failed: /) });
    expect(result.message).toMatch(/larger than 8388608 bytes/);
    expect(await closedWithin(1500)).not.toBeNull();
    expect(last.written).toBeLessThan(STOP_WRITING);
  });

  it('closes the connection at timeoutMs when the body comes too slowly to reach the bound', async () => {
    const started = Date.now();
    const result = await probeUpstream(target('/trickle'), { allowPrivate: true, fetch: http.fetch });
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/^initialize failed: /);
    // Ended at about timeoutMs (1 s), not left to trickle on (bounds wide for a loaded machine).
    expect(Date.now() - started).toBeLessThan(6000);
    expect(await closedWithin(3000)).not.toBeNull();
    expect(last.closedAfter).toBeLessThan(6000);
  });

  it('refuses an answer nested millions deep before parsing it', async () => {
    const result = await probeUpstream(target('/deep'), { allowPrivate: true, fetch: http.fetch });
    expect(result).toMatchObject({
      ok: false,
      message: expect.stringMatching(/nested deeper than 128 levels/),
    });
    expect(result.latencyMs).toBeLessThan(3000);
  });
});

describe('an HTTP+SSE upstream session', () => {
  it('closes a POST answer still coming when the session ends', async () => {
    const { session } = await UpstreamSession.open(
      { ...target('/sse'), transport: 'mcp-sse' },
      { allowPrivate: true, fetch: http.fetch },
      DEFAULT_UPSTREAM_LIMITS,
      { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
      { message: () => true, closed: () => {} },
    ).then(
      (opened) => opened,
      (err: unknown) => ({ session: null, err }),
    );
    // initialize's POST failed (500) with an error text that keeps coming: at timeoutMs the open
    // fails and closes the session, which closes that POST too.
    expect(session).toBeNull();
    expect(await closedWithin(3000)).not.toBeNull();
    expect(last.closedAfter).toBeLessThan(6000);
  });
});
