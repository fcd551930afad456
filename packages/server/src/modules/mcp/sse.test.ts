import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { SseClient, waitFor } from '../../../test/streams.js';
import type { DecisionEnvelope } from './model.js';
import { EventStreams } from './sse.js';

let app: FastifyInstance | null = null;
afterEach(async () => {
  await app?.close();
  app = null;
});

/** An app with one GET stream route on EventStreams with test limits; `recheck` decides at each ping. */
async function serve(recheck: () => Promise<boolean>, maxBufferedBytes = 1024 * 1024) {
  const streams = new EventStreams({ pingMs: 20, maxBufferedBytes });
  const handlers = new Set<(e: DecisionEnvelope) => void>();
  app = Fastify();
  app.addHook('preClose', async () => streams.endAll());
  app.get('/stream', async (req, reply) => {
    streams.start(req, reply, {
      sessionId: 's1',
      key: 'g1',
      log: null,
      subscribe: (h) => {
        handlers.add(h);
        return () => handlers.delete(h);
      },
      touch: () => {},
      recheck,
    });
  });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const publish = (e: Partial<DecisionEnvelope>) => {
    for (const h of handlers) h(e as DecisionEnvelope);
  };
  return { streams, handlers, publish, url: `${base}/stream` };
}

describe('MCP event streams (GET /v1/mcp/:slug)', () => {
  it('re-checks at each ping and ends the stream once the check fails', async () => {
    let valid = true;
    let checks = 0;
    const s = await serve(async () => {
      checks++;
      return valid;
    });
    const client = await SseClient.open(s.url);
    await waitFor(() => checks >= 2, 'two re-checks');
    expect(client.ended).toBe(false);
    valid = false;
    await waitFor(() => client.ended, 'the stream to end');
    await waitFor(() => s.streams.size === 0 && s.handlers.size === 0, 'the stream to be forgotten');
  });

  it('keeps the stream when a re-check fails with an error (store hiccup)', async () => {
    let checks = 0;
    const s = await serve(async () => {
      checks++;
      throw new Error('store down');
    });
    const client = await SseClient.open(s.url);
    await waitFor(() => checks >= 3, 'three re-checks');
    expect(client.ended).toBe(false);
    expect(s.streams.size).toBe(1);
    client.close();
  });

  it('drops a client that stops reading once its unsent buffer passes the limit', async () => {
    const s = await serve(async () => true, 64 * 1024);
    const client = await SseClient.open(s.url);
    await waitFor(() => client.events.length > 0, 'the session notification');
    client.res!.pause();
    const big = 'x'.repeat(64 * 1024);
    await waitFor(() => {
      s.publish({ type: 'decision', reason: big });
      return s.streams.size === 0;
    }, 'the slow stream to be dropped');
    expect(s.handlers.size).toBe(0);
    client.close();
  });
});
