import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type McpUpstream, startMcpUpstream } from '../../../test/mcp-upstream.js';
import { createHttpFetch, type ResolveAll } from './http-fetch.js';
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
});
