import type { ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type HostileUpstream, sseEvent, startHostileUpstream } from '../../../test/hostile-upstream.js';
import { createHttpFetch, type RawRequest } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { LINGER_MS, StreamableHttpTransport } from './streamable-transport.js';
import { UpstreamError } from './upstream-error.js';
import { UpstreamSession } from './upstream-session.js';

/**
 * What an upstream session over Streamable HTTP keeps open: nothing for a request that is over.
 * A request the upstream never answers closes its connection at its timeout (or cancellation), an
 * answer stream left open after its response is closed, and the session's end closes the rest.
 */
const http = createHttpFetch({ allowPrivate: true });
let upstream: HostileUpstream;
/** Answers the upstream is holding (never ended), so the test can tell them from closed ones. */
const held: ServerResponse[] = [];

beforeAll(async () => {
  upstream = await startHostileUpstream((msg, res) => {
    const name = msg.params?.name;
    const result = { jsonrpc: '2.0', id: msg.id, result: { content: [] } };
    if (name === 'silent') held.push(res);
    else if (name === 'open-stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      held.push(res);
    } else if (name === 'linger') {
      res.writeHead(200, { 'content-type': 'text/event-stream' }).write(sseEvent(result));
      held.push(res);
    } else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(result));
  });
});
afterAll(async () => {
  await upstream.close();
  http.close();
});

let session: UpstreamSession;
let closed: string[];
const warnings: string[] = [];
const onWarning = (w: Error) => warnings.push(w.name);

beforeEach(async () => {
  closed = [];
  warnings.length = 0;
  process.on('warning', onWarning);
  ({ session } = await UpstreamSession.open(
    // Far enough for a loaded machine; the calls that must time out set a short timeout of their own.
    { id: 'u1', transport: 'mcp-streamable-http', url: upstream.url, headers: {}, timeoutMs: 10_000 },
    { allowPrivate: true, fetch: http.fetch, request: http.request, standaloneStream: false },
    DEFAULT_UPSTREAM_LIMITS,
    { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
    { message: () => true, closed: (why) => closed.push(why) },
  ));
  session.notify('notifications/initialized', undefined);
});
afterEach(async () => {
  process.off('warning', onWarning);
  await session.close();
  for (const res of held.splice(0)) res.destroy();
});

const call = (name: string, timeoutMs?: number) =>
  session.request('tools/call', { name, arguments: {} }, timeoutMs).done;

/** Waits until the upstream has at most `n` connections open (or fails after `ms`). */
async function openAtMost(n: number, ms = 3000): Promise<number> {
  const deadline = Date.now() + ms;
  while (upstream.connections().open > n && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 25));
  return upstream.connections().open;
}

describe('an upstream session over Streamable HTTP', () => {
  it.each([
    ['sends no answer at all', 'silent'],
    ['opens an answer stream and sends nothing on it', 'open-stream'],
  ])('closes the connection of a request that times out when the upstream %s', async (_what, tool) => {
    const outcomes = await Promise.allSettled(Array.from({ length: 30 }, () => call(tool, 300)));
    for (const o of outcomes) expect(o).toMatchObject({ status: 'rejected', reason: { kind: 'timeout' } });
    // 30 timed-out calls hold nothing: what is left is the idle kept-alive connection or two.
    expect(await openAtMost(3)).toBeLessThanOrEqual(3);
    expect(warnings).not.toContain('MaxListenersExceededWarning');
    // The session goes on.
    expect(session.closedReason).toBeNull();
    expect(await call('ok')).toEqual({ content: [] });
    expect(closed).toEqual([]);
  });

  it('closes the connection of a request the client cancels', async () => {
    // A timeout far away: only the cancel can close this request's connection within the test.
    const sent = session.request('tools/call', { name: 'silent', arguments: {} }, 60_000);
    sent.done.catch(() => {});
    while (held.length === 0) await new Promise((r) => setTimeout(r, 10));
    const gone = new Promise<boolean>((resolve) => {
      held[0]!.once('close', () => resolve(true));
      setTimeout(() => resolve(false), 10_000);
    });
    session.abandon(sent.id, new UpstreamError('cancelled', 'cancelled by the client'));
    await expect(sent.done).rejects.toMatchObject({ kind: 'cancelled' });
    expect(await gone).toBe(true);
  });

  it('closes an answer stream the upstream leaves open after its response', async () => {
    const before = upstream.connections().open;
    for (let i = 0; i < 20; i++) expect(await call('linger')).toEqual({ content: [] });
    // Each call got its answer at once; their streams are closed LINGER_MS after it.
    await new Promise((r) => setTimeout(r, LINGER_MS));
    expect(await openAtMost(before + 1)).toBeLessThanOrEqual(before + 1);
    expect(session.closedReason).toBeNull();
  });

  it('closes every connection when the session ends', async () => {
    // Idle kept-alive connections of the pool (initialize's) are not the session's.
    const idle = upstream.connections().open;
    const pending = Array.from({ length: 10 }, () => call('silent').catch(() => {}));
    const streams = Array.from({ length: 10 }, () => call('open-stream').catch(() => {}));
    const deadline = Date.now() + 10_000;
    while (upstream.connections().open < 20 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 25));
    expect(upstream.connections().open).toBeGreaterThanOrEqual(20);
    await session.close();
    await Promise.all([...pending, ...streams]);
    expect(await openAtMost(idle)).toBeLessThanOrEqual(idle);
  });
});

describe('the order of a session’s messages', () => {
  it('sends a request only after the notifications queued before it were taken', async () => {
    let heldNotification: ServerResponse | null = null;
    let release: () => void = () => {};
    /** Whether each tools/call arrived while the notification before it was still being taken. */
    const arrivedEarly: boolean[] = [];
    const ordered = await startHostileUpstream((msg, res) => {
      arrivedEarly.push(heldNotification !== null);
      release();
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [] } }));
    });
    // The hostile upstream answers notifications itself: hold them here, in front of it.
    const { createServer, request } = await import('node:http');
    const target = new URL(ordered.url);
    const front = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const text = body.toString('utf8');
        const forward = () => {
          const out = request(
            {
              host: target.hostname,
              port: target.port,
              path: target.pathname,
              method: req.method,
              headers: req.headers,
            },
            (answer) => {
              res.writeHead(answer.statusCode ?? 502, answer.headers);
              answer.pipe(res);
            },
          );
          out.end(body);
        };
        if (text.includes('"notifications/progress"')) {
          // Let go when a request overtakes it, or after 300 ms.
          heldNotification = res;
          const timer = setTimeout(() => release(), 300);
          release = () => {
            clearTimeout(timer);
            release = () => {};
            heldNotification = null;
            forward();
          };
        } else forward();
      });
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', () => resolve()));
    const port = (front.address() as { port: number }).port;
    const { session: s } = await UpstreamSession.open(
      {
        id: 'u2',
        transport: 'mcp-streamable-http',
        url: `http://127.0.0.1:${port}/mcp`,
        headers: {},
        timeoutMs: 5000,
      },
      { allowPrivate: true, fetch: http.fetch, request: http.request, standaloneStream: false },
      DEFAULT_UPSTREAM_LIMITS,
      { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
      { message: () => true, closed: () => {} },
    );
    try {
      s.notify('notifications/progress', { progressToken: 't', progress: 1 });
      expect(await s.request('tools/call', { name: 'after', arguments: {} }).done).toEqual({ content: [] });
      expect(arrivedEarly).toEqual([false]);
      expect(ordered.notifications.map((n) => n.method)).toEqual(['notifications/progress']);
    } finally {
      await s.close();
      front.closeAllConnections();
      await new Promise<void>((resolve) => front.close(() => resolve()));
      await ordered.close();
    }
  });
});

describe('the standalone GET stream of a session', () => {
  it('is opened once, however often the client sends notifications/initialized', async () => {
    const gets: string[] = [];
    const counting: RawRequest = (url, init) => {
      if (init.method === 'GET') gets.push(url.href);
      return http.request(url, init);
    };
    const transport = new StreamableHttpTransport(
      new URL(upstream.url),
      {},
      counting,
      DEFAULT_UPSTREAM_LIMITS,
      { oversize: () => {}, refused: () => {} },
      true,
    );
    try {
      await transport.send({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: '2025-06-18',
          capabilities: {},
          clientInfo: { name: 'test', version: '1' },
        },
      });
      // The stream is asked for as soon as the upstream took the notification (before send resolves).
      for (let i = 0; i < 5; i++)
        await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      expect(gets).toEqual([upstream.url]);
    } finally {
      await transport.close();
    }
  });
});
