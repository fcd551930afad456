import { connect } from 'node:net';
import { inspect } from 'node:util';
import { describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { createTenant } from '../../test/helpers.js';
import { WsClient, waitFor } from '../../test/streams.js';

/** A raw HTTP/1.1 exchange that records what the server sends and whether it closed the connection. */
function exchange(url: string, request: string) {
  const u = new URL(url);
  const state = { received: '', closed: false };
  const socket = connect(Number(u.port), u.hostname);
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    state.received += chunk;
  });
  // The client keeps its side open: only the server can close this connection.
  socket.on('end', () => {
    state.closed = true;
    socket.destroy();
  });
  socket.on('close', () => {
    state.closed = true;
  });
  socket.on('error', () => {});
  socket.write(request);
  return { state, socket };
}

const upgradeRequest = (path: string, upgrade = 'websocket') =>
  `GET ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: ${upgrade}\r\n\r\n`;

describe('HTTP requests carrying Upgrade that do not become WebSockets', () => {
  const t = useTestApp({}, { listen: true });

  it.each([
    ['/healthz', 'websocket', '200'],
    ['/healthz', 'h2c', '200'],
    ['/no-such-route', 'websocket', '404'],
    ['/v1/events/stream', 'websocket', '401'],
    ['/ws?token=%00', 'websocket', '400'],
  ])(
    'GET %s with Upgrade: %s is answered %s, then its connection is closed',
    async (path, upgrade, status) => {
      const { state, socket } = exchange(t.url, upgradeRequest(path, upgrade));
      try {
        await waitFor(() => state.closed, 'the server to close the connection', 5000);
        expect(state.received.startsWith(`HTTP/1.1 ${status} `)).toBe(true);
        // The whole answer arrived before the connection was closed.
        const [head, body] = state.received.split('\r\n\r\n') as [string, string];
        const length = /\r\ncontent-length: (\d+)/i.exec(head);
        if (length) expect(Buffer.byteLength(body)).toBe(Number(length[1]));
      } finally {
        socket.destroy();
      }
    },
  );

  it('refuses a WebSocket handshake on the SSE stream with 400, never logging the apiKey it carries', async () => {
    const tenant = await createTenant(t);
    const logged: unknown[] = [];
    const spies = (['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const).map((level) =>
      vi.spyOn(t.app.log, level).mockImplementation((...args: unknown[]) => {
        // `req` and `res` fields go through the serializers (the request's redacts credentials, see
        // redact.test; the reply's keeps the status).
        const [fields] = args;
        if (typeof fields === 'object' && fields !== null && ('req' in fields || 'res' in fields)) return;
        logged.push(args);
      }),
    );
    try {
      const url = `${t.url.replace(/^http/, 'ws')}/v1/events/stream?apiKey=${encodeURIComponent(tenant.apiKey)}`;
      const refused = await WsClient.open(url).then(
        (c) => {
          c.close();
          return null;
        },
        (err: Error & { body?: string }) => err,
      );
      expect(refused?.message).toBe('HTTP 400');
      expect(JSON.parse(refused?.body ?? '{}').error.code).toBe('validation_failed');
      expect(inspect(logged, { depth: 6 })).not.toContain(tenant.apiKey);
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });
});
