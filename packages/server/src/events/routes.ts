import websocket from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.js';
import type { JwtVerifier } from '../lib/jwt.js';
import type { StreamClient } from './hub.js';
import { DEFAULT_STREAM_OPTIONS, type StreamOptions } from './options.js';
import { sseRoutes } from './sse.js';
import { wsErrorHandler, wsRoutes } from './ws.js';

/**
 * Real-time delivery: SSE at GET /v1/events/stream and WebSocket at GET /ws. Registered as an
 * encapsulated plugin, so @fastify/websocket's hooks apply to these routes only and leave the rest of
 * the API (auth, errors, the hot path) untouched.
 */
export async function eventRoutes(
  app: FastifyInstance,
  { ctx, jwt, streams }: { ctx: AppContext; jwt: JwtVerifier; streams?: Partial<StreamOptions> },
): Promise<void> {
  const options: StreamOptions = { ...DEFAULT_STREAM_OPTIONS, ...streams };
  const hub = ctx.streams;

  const beat = (kind: StreamClient['kind']) => () => {
    for (const client of hub.clients(kind)) {
      if (client.gone) hub.remove(client);
      else client.heartbeat();
    }
  };
  // One timer per transport for all connections, not one per connection.
  const timers = [
    setInterval(beat('sse'), options.sseHeartbeatMs),
    setInterval(beat('ws'), options.wsHeartbeatMs),
  ];
  for (const t of timers) t.unref();

  // A revoked key, a deleted organization or a signed-out session ends its streams at once, on
  // every instance (revocations from other instances arrive through the same calls).
  const unwatch = [
    ctx.keys.watchRevocations((r) => {
      if ('keyIds' in r) hub.endKeys(r.keyIds, 'the API key was revoked');
      else hub.endOrganization(r.organizationId, 'the organization was deleted');
    }),
    ctx.sessions.watchEnds((session) => hub.endSession(session, 'the session ended')),
  ];

  // Added before the websocket plugin so it runs first: clients get 1001 "going away", and the
  // server's close is not held open by streams that never end on their own.
  app.addHook('preClose', async () => {
    for (const t of timers) clearInterval(t);
    for (const u of unwatch) u();
    hub.close();
  });

  await app.register(websocket, { options: { maxPayload: 64 * 1024 }, errorHandler: wsErrorHandler });
  await app.register(sseRoutes, { ctx, jwt, options });
  await app.register(wsRoutes, { ctx, jwt, options });
}
