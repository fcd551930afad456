import { createServer, type IncomingHttpHeaders, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Client, createClient } from '@svc/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../server/test/fixture.js';
import { asUser, type Tenant } from '../../server/test/helpers.js';
import { newIdempotencyKey } from '../src/log.js';
import { createTenant, putPolicy } from './live.js';

const t = useTestApp({}, { listen: true });
const clients: Client[] = [];
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
});

const PAY = { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function tenantWithPolicy(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', PAY);
  return tenant;
}

async function decisionsOf(tenant: Tenant): Promise<{ arguments: Record<string, unknown> }[]> {
  const page = await t.inject({ method: 'GET', url: '/v1/decisions?limit=100', headers: asUser(tenant) });
  return page.json().data;
}

interface LogPost {
  key: string | undefined;
  status: number;
  replayed: string | undefined;
  dropped: boolean;
}

/**
 * An HTTP proxy to the service that, while `dropNext` is set, forwards a POST /v1/decisions, waits
 * for the service's whole answer (the batch is committed by then) and closes the client's connection
 * without passing it on: an answer lost on its way back. Every other request goes through.
 */
class LosingProxy {
  dropNext = 0;
  readonly posts: LogPost[] = [];
  private server!: Server;

  constructor(private readonly target: URL) {}

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const headers: IncomingHttpHeaders = { ...req.headers, host: this.target.host };
        const up = request(
          { host: this.target.hostname, port: this.target.port, path: req.url, method: req.method, headers },
          (answer) => {
            const body: Buffer[] = [];
            answer.on('data', (c: Buffer) => body.push(c));
            answer.on('end', () => {
              const isLog = req.method === 'POST' && req.url === '/v1/decisions';
              const drop = isLog && this.dropNext > 0;
              if (isLog) {
                this.posts.push({
                  key: req.headers['idempotency-key'] as string | undefined,
                  status: answer.statusCode ?? 0,
                  replayed: answer.headers['idempotent-replayed'] as string | undefined,
                  dropped: drop,
                });
              }
              if (drop) {
                this.dropNext--;
                req.socket.destroy();
                return;
              }
              const out = Buffer.concat(body);
              const { 'transfer-encoding': _te, connection: _c, 'keep-alive': _k, ...rest } = answer.headers;
              res.writeHead(answer.statusCode ?? 502, { ...rest, 'content-length': String(out.length) });
              res.end(out);
            });
          },
        );
        up.on('error', () => res.destroy());
        up.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', () => r()));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

describe('the decision log and Idempotency-Key', () => {
  let proxy: LosingProxy;
  let proxyUrl: string;
  beforeAll(async () => {
    proxy = new LosingProxy(new URL(t.url));
    proxyUrl = await proxy.start();
  });
  afterAll(async () => proxy.close());

  it('records a batch once when its answer is lost after the commit: the retry sends the same key', async () => {
    const tenant = await tenantWithPolicy();
    proxy.posts.length = 0;
    proxy.dropNext = 1;
    const errors: Error[] = [];
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: proxyUrl,
      live: false,
      log: { batchSize: 100, flushIntervalMs: 5000 },
      onError: (e) => errors.push(e),
    });
    clients.push(client);
    for (const amount of [1, 2, 3]) {
      expect(await client.validate('pay', { amount })).toMatchObject({ decision: 'allow', source: 'local' });
    }
    await client.flush();
    // The first attempt was recorded and its answer dropped; the retry got that answer replayed.
    expect(proxy.posts).toEqual([
      { key: expect.stringMatching(UUID), status: 201, replayed: undefined, dropped: true },
      { key: proxy.posts[0]!.key, status: 201, replayed: 'true', dropped: false },
    ]);
    // The lost answer was a network failure, reported as such.
    expect(errors).toHaveLength(1);
    const logged = await decisionsOf(tenant);
    expect(logged.map((d) => d.arguments.amount).sort()).toEqual([1, 2, 3]);
  });

  it('sends a new key with each batch', async () => {
    const tenant = await tenantWithPolicy();
    proxy.posts.length = 0;
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: proxyUrl,
      live: false,
      log: { batchSize: 1 },
    });
    clients.push(client);
    await client.validate('pay', { amount: 1 });
    await client.flush();
    await client.validate('pay', { amount: 2 });
    await client.flush();
    const keys = proxy.posts.map((p) => p.key);
    expect(keys).toHaveLength(2);
    expect(new Set(keys).size).toBe(2);
    expect(proxy.posts.every((p) => p.status === 201 && p.replayed === undefined)).toBe(true);
    expect(await decisionsOf(tenant)).toHaveLength(2);
  });
});

describe('a retry while the first attempt still runs', () => {
  it('waits on 409 idempotency_request_in_progress and asks again with the same key, quietly', async () => {
    const tenant = await tenantWithPolicy();
    const keys: (string | undefined)[] = [];
    const errors: Error[] = [];
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      onError: (e) => errors.push(e),
      fetch: async (input, init) => {
        if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
          keys.push((init.headers as Record<string, string>)['idempotency-key']);
          if (keys.length === 1) {
            return new Response(
              JSON.stringify({
                error: { code: 'idempotency_request_in_progress', message: 'still running' },
              }),
              { status: 409, headers: { 'content-type': 'application/json' } },
            );
          }
        }
        return fetch(input, init);
      },
    });
    clients.push(client);
    await client.validate('pay', { amount: 1 });
    await client.flush();
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    expect(errors).toEqual([]);
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });
});

describe('newIdempotencyKey', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  it('is a random version 4 UUID, also where crypto.randomUUID is missing (plain-HTTP pages)', () => {
    const a = newIdempotencyKey();
    expect(a).toMatch(UUID);
    expect(newIdempotencyKey()).not.toBe(a);
    const real = globalThis.crypto;
    vi.stubGlobal('crypto', { getRandomValues: real.getRandomValues.bind(real) });
    const b = newIdempotencyKey();
    expect(b).toMatch(UUID);
    expect(newIdempotencyKey()).not.toBe(b);
  });
});
