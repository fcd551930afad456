import { createServer, type Server } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type McpUpstream, startMcpUpstream } from '../../../test/mcp-upstream.js';
import { createHttpFetch, MAX_SOCKETS_PER_ORIGIN, ownMessage, type ResolveAll } from './http-fetch.js';
import { probeUpstream } from './upstream-client.js';

let server: Server;
let port: number;
let upstream: McpUpstream;

beforeAll(async () => {
  server = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  port = (server.address() as AddressInfo).port;
  upstream = await startMcpUpstream({ transport: 'streamable' });
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await upstream.close();
});

/** A resolver answering `address` for every name: what a rebinding DNS server does on its second answer. */
const resolvingTo =
  (address: string): ResolveAll =>
  (_host, _options, callback) =>
    callback(null, [{ address, family: address.includes(':') ? 6 : 4 }]);

/**
 * An upstream that closes each connection when its second request arrives, unanswered: what a
 * server whose idle timeout ends just as a kept-alive connection is used again does. `seen` counts
 * the requests it answered.
 */
async function closingOnReuse(): Promise<{ url: URL; seen: string[]; close(): Promise<void> }> {
  const seen: string[] = [];
  const sockets = new Set<Socket>();
  const tcp = createNetServer((socket) => {
    sockets.add(socket);
    let requests = 0;
    let buffer = '';
    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      const end = buffer.indexOf('\r\n\r\n');
      if (end === -1) return;
      const length = Number(/content-length: (\d+)/i.exec(buffer.slice(0, end))?.[1] ?? 0);
      if (buffer.length < end + 4 + length) return;
      const body = buffer.slice(end + 4, end + 4 + length);
      buffer = buffer.slice(end + 4 + length);
      if (++requests > 1) return void socket.destroy();
      seen.push(body);
      socket.write(
        'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}',
      );
    });
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', () => r()));
  return {
    url: new URL(`http://127.0.0.1:${(tcp.address() as AddressInfo).port}/mcp`),
    seen,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => tcp.close(r));
    },
  };
}

describe('a kept-alive upstream connection closed as it is used again', () => {
  it('carries the request on a new connection, except a tool call, which is never sent twice', async () => {
    const up = await closingOnReuse();
    const http = createHttpFetch({ allowPrivate: true });
    const post = (method: string) => ({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method }),
    });
    try {
      for (const send of [
        (m: string) => http.request(up.url, post(m)).then((res) => res.resume()),
        (m: string) => http.fetch(up.url.href, post(m)).then((res) => res.text()),
      ]) {
        await send('initialize');
        // The second request goes out on the kept-alive connection, which the upstream closes.
        await send('resources/list');
        await expect(send('tools/call')).rejects.toMatchObject({ code: 'ECONNRESET' });
      }
      expect(up.seen.map((b) => JSON.parse(b).method)).toEqual([
        'initialize',
        'resources/list',
        'initialize',
        'resources/list',
      ]);
    } finally {
      http.close();
      await up.close();
    }
  });
});

describe('createHttpFetch (pooled upstream sockets)', () => {
  it('refuses a name that resolves to a blocked address at connect time', async () => {
    for (const address of ['169.254.169.254', 'fe80::1', '::ffff:169.254.169.254']) {
      const http = createHttpFetch({ allowPrivate: false, resolveAll: resolvingTo(address) });
      try {
        await expect(http.fetch(`http://rebind.test:${port}/`)).rejects.toThrow(/upstream address refused/);
      } finally {
        http.close();
      }
    }
  });

  it('connects when the name resolves to an allowed address', async () => {
    const http = createHttpFetch({ allowPrivate: false, resolveAll: resolvingTo('127.0.0.1') });
    try {
      const res = await http.fetch(`http://rebind.test:${port}/`);
      expect(await res.text()).toBe('ok');
    } finally {
      http.close();
    }
  });

  it('does not check addresses when private upstreams are allowed', async () => {
    const http = createHttpFetch({ allowPrivate: true, resolveAll: resolvingTo('169.254.169.254') });
    try {
      expect(await (await http.fetch(`http://127.0.0.1:${port}/`)).text()).toBe('ok');
    } finally {
      http.close();
    }
  });

  it('makes the /test probe fail when the name rebinds to a metadata address after the guard', async () => {
    const url = new URL(upstream.url);
    url.hostname = 'rebind.test';
    const target = {
      id: 'u1',
      transport: 'mcp-streamable-http' as const,
      url: url.toString(),
      headers: {},
      timeoutMs: 2000,
    };
    // The guard's lookup sees loopback; the sockets then get a metadata address.
    const guard = { allowPrivate: false, lookup: async () => ['127.0.0.1'] };
    const rebinding = createHttpFetch({ allowPrivate: false, resolveAll: resolvingTo('169.254.169.254') });
    const honest = createHttpFetch({ allowPrivate: false, resolveAll: resolvingTo('127.0.0.1') });
    try {
      const refused = await probeUpstream(target, { ...guard, fetch: rebinding.fetch });
      expect(refused).toMatchObject({ ok: false, status: 0, message: expect.stringMatching(/refused/) });
      const ok = await probeUpstream(target, { ...guard, fetch: honest.fetch });
      expect(ok).toMatchObject({ ok: true, status: 200 });
    } finally {
      rebinding.close();
      honest.close();
    }
  });

  it('carries requests on at most maxSocketsPerOrigin connections per origin; event streams are not counted', async () => {
    expect(MAX_SOCKETS_PER_ORIGIN).toBe(256);
    let inflight = 0;
    let most = 0;
    const held = createServer((req, res) => {
      if (req.method === 'GET') {
        // An event stream: open until the client goes.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.flushHeaders();
        return;
      }
      inflight++;
      most = Math.max(most, inflight);
      req.resume();
      setTimeout(() => {
        inflight--;
        res.end('ok');
      }, 50);
    });
    await new Promise<void>((r) => held.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(held.address() as AddressInfo).port}/`;
    const http = createHttpFetch({ allowPrivate: true, maxSocketsPerOrigin: 4 });
    try {
      // More streams than request connections: the requests still get through.
      const streams = await Promise.all(Array.from({ length: 6 }, () => http.fetch(url, { method: 'GET' })));
      const posts = await Promise.all(
        Array.from({ length: 20 }, () =>
          http.fetch(url, { method: 'POST', body: 'x' }).then((r) => r.text()),
        ),
      );
      expect(posts).toEqual(Array.from({ length: 20 }, () => 'ok'));
      expect(most).toBe(4);
      for (const s of streams) await s.body?.cancel();
    } finally {
      http.close();
      held.closeAllConnections();
      await new Promise((r) => held.close(r));
    }
  });

  it("sends the gateway's own messages even while calls hold every request connection", async () => {
    // The call is answered only once the answer it waits for (say, to a sampling request) arrived.
    let answered: () => void = () => {};
    const arrived = new Promise<void>((r) => {
      answered = r;
    });
    const held = createServer((req, res) => {
      req.resume();
      if (req.url === '/answer') {
        answered();
        res.end('taken');
      } else void arrived.then(() => res.end('call done'));
    });
    await new Promise<void>((r) => held.listen(0, '127.0.0.1', () => r()));
    const base = `http://127.0.0.1:${(held.address() as AddressInfo).port}`;
    const http = createHttpFetch({ allowPrivate: true, maxSocketsPerOrigin: 1 });
    try {
      const call = http.fetch(`${base}/call`, { method: 'POST', body: '{}' }).then((r) => r.text());
      const answer = ownMessage.run(true, () =>
        http.fetch(`${base}/answer`, { method: 'POST', body: '{}' }).then((r) => r.text()),
      );
      expect(await Promise.all([answer, call])).toEqual(['taken', 'call done']);
    } finally {
      http.close();
      held.closeAllConnections();
      await new Promise((r) => held.close(r));
    }
  });
});
