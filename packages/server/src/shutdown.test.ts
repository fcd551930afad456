import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freshDatabase, JWT_SECRET, type TestDatabase } from '../test/helpers.js';
import { organizationWithProject } from '../test/serve.js';
import { waitFor } from '../test/streams.js';
import { loadConfig } from './config.js';
import { type RunningServer, startServer } from './server.js';
import { openStore } from './storage/db.js';

let database: TestDatabase | null = null;
let server: RunningServer | null = null;
afterEach(async () => {
  await server?.stop().catch(() => {});
  server = null;
  await database?.drop();
  database = null;
});

async function start() {
  database = await freshDatabase();
  const config = {
    ...loadConfig({}),
    jwtSecret: JWT_SECRET,
    databaseUrl: database.url,
    logLevel: 'silent' as const,
    port: 0,
    host: '127.0.0.1',
  };
  server = await startServer(config);
  const { token, apiKey } = await organizationWithProject(server, config);
  return { server, port: Number(new URL(server.url).port), token, apiKey };
}

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The HTTP/1.1 responses (with Content-Length) read from a socket until the server closes it. */
function responses(socket: Socket): Promise<RawResponse[]> {
  return new Promise((resolve, reject) => {
    let data = Buffer.alloc(0);
    socket.on('data', (d) => {
      data = Buffer.concat([data, d]);
    });
    socket.once('error', reject);
    socket.once('close', () => {
      const out: RawResponse[] = [];
      let rest = data;
      while (rest.length > 0) {
        const end = rest.indexOf('\r\n\r\n');
        if (end < 0) break;
        const [statusLine, ...lines] = rest.subarray(0, end).toString('latin1').split('\r\n');
        const headers: Record<string, string> = {};
        for (const l of lines) {
          const i = l.indexOf(':');
          headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
        }
        const length = Number(headers['content-length'] ?? 0);
        out.push({
          status: Number(statusLine!.split(' ')[1]),
          headers,
          body: rest.subarray(end + 4, end + 4 + length).toString('utf8'),
        });
        rest = rest.subarray(end + 4 + length);
      }
      resolve(out);
    });
  });
}

/** A POST whose body has not all been sent: in flight until `finish` sends the rest (and what follows). */
async function inFlight(port: number, path: string, headers: Record<string, string>, body: string) {
  const socket = connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  const read = responses(socket);
  const head = Object.entries({ ...headers, host: 'x', 'content-type': 'application/json' })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(`POST ${path} HTTP/1.1\r\n${head}content-length: ${Buffer.byteLength(body)}\r\n\r\n`);
  socket.write(body.slice(0, 1));
  return {
    finish: (then: string) => socket.write(body.slice(1) + then),
    read,
  };
}

/** A pipelined request, as raw bytes. */
function request(path: string, headers: Record<string, string>, body: string): string {
  const head = Object.entries({ ...headers, host: 'x', 'content-type': 'application/json' })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  return `POST ${path} HTTP/1.1\r\n${head}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** Resolves once the listening socket is closed (a new connection is refused). */
async function refusesConnections(port: number) {
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          resolve(false);
        });
        s.once('error', () => resolve(true));
      }),
    'the listening socket closed',
  );
}

describe('a request that arrives on a kept-alive connection while the server stops', () => {
  it('is refused with 503 service_unavailable in the error envelope, and nothing is recorded for it', async () => {
    const { server, port, token, apiKey } = await start();
    // Requests whose headers the server has read: both below are in flight before the stop begins.
    let received = 0;
    server.app.server.on('request', () => received++);
    const api = await inFlight(
      port,
      '/v1/organizations',
      { authorization: `Bearer ${token}` },
      JSON.stringify({ name: 'T', slug: 'second-org' }),
    );
    const gateway = await inFlight(
      port,
      '/v1/organizations',
      { authorization: `Bearer ${token}` },
      JSON.stringify({ name: 'U', slug: 'third-org' }),
    );
    await waitFor(() => received === 2, 'both requests received');
    const stopped = server.stop();
    await refusesConnections(port);
    api.finish(
      request(
        '/v1/tools/validate',
        { 'x-service-api-key': apiKey, 'x-request-id': 'late-validate' },
        JSON.stringify({ tool_name: 'wire', arguments: {} }),
      ),
    );
    gateway.finish(request('/v1/gateway/payees', { 'x-service-api-key': apiKey }, JSON.stringify({})));
    const [first, late] = await api.read;
    const [, lateGateway] = await gateway.read;
    await stopped;

    // The requests in flight when the stop began are answered as usual.
    expect(first!.status).toBe(201);
    expect(late!.status).toBe(503);
    expect(late!.headers.connection).toBe('close');
    expect(late!.headers['x-request-id']).toBe('late-validate');
    expect(JSON.parse(late!.body)).toEqual({
      error: { code: 'service_unavailable', message: expect.any(String) },
    });
    // Under the payment gateway, its own envelope.
    expect(lateGateway!.status).toBe(503);
    expect(JSON.parse(lateGateway!.body).error).toMatchObject({
      type: 'api_error',
      code: 'service_unavailable',
    });

    const store = openStore(database!.url);
    try {
      expect(await store.db.selectFrom('decisions').select('id').execute()).toEqual([]);
      const orgs = await store.db.selectFrom('organizations').select('slug').execute();
      expect(orgs.map((o) => o.slug).sort()).toEqual(['second-org', 'stop-org', 'third-org']);
    } finally {
      await store.close();
    }
  });
});
