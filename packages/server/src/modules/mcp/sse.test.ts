import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { SseClient, waitFor } from '../../../test/streams.js';
import type { DecisionEnvelope } from './model.js';
import { DEFAULT_STREAM_LIMITS, EventStreams } from './sse.js';

let app: FastifyInstance | null = null;
afterEach(async () => {
  await app?.close();
  app = null;
});

/**
 * An app with one GET stream route on EventStreams with test limits; `recheck` decides at each ping.
 * `?feed=1` opens a key-wide decision feed (no session), refused with 409 past the key's bound.
 */
async function serve(recheck: () => Promise<boolean>, maxBufferedBytes = 1024 * 1024, feedsPerKey = 16) {
  const streams = new EventStreams({ ...DEFAULT_STREAM_LIMITS, pingMs: 20, maxBufferedBytes, feedsPerKey });
  const handlers = new Set<(e: DecisionEnvelope) => void>();
  app = Fastify();
  app.addHook('preClose', async () => streams.endAll());
  app.get('/stream', async (req, reply) => {
    const q = req.query as { key?: string; org?: string; feed?: string };
    if (q.feed && !streams.canOpenFeed(q.key ?? 'k1')) return reply.code(409).send();
    streams.start(req, reply, {
      sessionId: q.feed ? null : 's1',
      holder: { keyId: q.key ?? 'k1', organizationId: q.org ?? 'o1' },
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

  it("ends a revoked key's streams and a deleted organization's at once, no other", async () => {
    // The re-check would keep every stream: only the revocation ends them.
    const s = await serve(async () => true);
    const open = async (key: string, org: string) => {
      const c = await SseClient.open(`${s.url}?key=${key}&org=${org}`);
      await waitFor(() => c.events.length > 0, 'the session notification');
      return c;
    };
    const [k1, k1again, k2, k3, other] = [
      await open('k1', 'o1'),
      await open('k1', 'o1'),
      await open('k2', 'o1'),
      await open('k3', 'o2'),
      await open('k4', 'o3'),
    ];
    s.streams.endKeys(['k1']);
    await waitFor(() => k1.ended && k1again.ended, "the key's streams to end", 1000);
    expect([k2.ended, k3.ended, other.ended]).toEqual([false, false, false]);
    s.streams.endOrganization('o2');
    await waitFor(() => k3.ended, "the organization's stream to end", 1000);
    expect([k2.ended, other.ended]).toEqual([false, false]);
    await waitFor(() => s.streams.size === 2, 'the ended streams to be forgotten');
    // Indexes hold nothing of ended streams: ending them again is harmless.
    s.streams.endKeys(['k1', 'k3']);
    expect(s.streams.size).toBe(2);
    k2.close();
    other.close();
  });

  it("counts a key's decision feeds until they end, however they end", async () => {
    let valid = true;
    const s = await serve(async () => valid, 1024 * 1024, 2);
    const feed = (key: string, org = 'o1') => SseClient.open(`${s.url}?feed=1&key=${key}&org=${org}`);
    const gone = (key: string) =>
      waitFor(() => s.streams.feedsOf(key) === 0, `the feeds of ${key} to be freed`);
    // Streams of a session are not feeds.
    const sessionStream = await SseClient.open(`${s.url}?key=k1`);
    const [a, b] = [await feed('k1'), await feed('k1')];
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(s.streams.feedsOf('k1')).toBe(2);
    expect(s.streams.canOpenFeed('k1')).toBe(false);
    expect((await feed('k1')).status).toBe(409);
    // Another key has its own.
    expect((await feed('k2')).status).toBe(200);
    // The client goes away.
    a.close();
    await waitFor(() => s.streams.canOpenFeed('k1'), 'a feed to be freed');
    const c = await feed('k1');
    expect(c.status).toBe(200);
    // The key is revoked.
    s.streams.endKeys(['k1']);
    await gone('k1');
    expect(s.streams.feedsOf('k2')).toBe(1);
    await waitFor(() => b.ended && c.ended && sessionStream.ended, "the key's streams to end");
    // Re-checks that fail (the key or the upstream no longer holds).
    expect((await feed('k3')).status).toBe(200);
    expect(s.streams.feedsOf('k3')).toBe(1);
    valid = false;
    await gone('k3');
    await gone('k2');
    valid = true;
    // The organization is deleted, then the server shuts down.
    await feed('k4', 'o9');
    expect(s.streams.feedsOf('k4')).toBe(1);
    s.streams.endOrganization('o9');
    await gone('k4');
    await feed('k5');
    expect(s.streams.feedsOf('k5')).toBe(1);
    s.streams.endAll();
    await gone('k5');
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

  it('delivers an event far over the limit, and the events and pings right after it, to a client that reads', async () => {
    const s = await serve(async () => true, 64 * 1024);
    const client = await SseClient.open(s.url);
    await waitFor(() => client.events.length > 0, 'the session notification');
    s.publish({ type: 'decision', reason: 'x'.repeat(6_000_000) });
    // The next events come while most of the large one is still unsent (pings every 20 ms too).
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setImmediate(r));
      s.publish({ type: 'decision', reason: `small ${i}` });
    }
    await waitFor(() => client.events.length === 22, 'all the events');
    expect((client.events[1]!.data as { reason: string }).reason).toHaveLength(6_000_000);
    expect(client.events.at(-1)!.data).toMatchObject({ reason: 'small 19' });
    expect(client.ended).toBe(false);
    expect(s.streams.size).toBe(1);
    client.close();
  });

  it('gives a client time to read a large last event when its stream ends, and cuts one that does not read', async () => {
    const s = await serve(async () => true, 2 * 1024 * 1024);
    const reader = await SseClient.open(s.url);
    const idle = await SseClient.open(s.url);
    await waitFor(() => reader.events.length > 0 && idle.events.length > 0, 'the session notifications');
    // Neither reads for now; 6 MB is more than the kernel's socket buffers take for them.
    reader.res!.pause();
    idle.res!.pause();
    s.publish({ type: 'decision', reason: 'y'.repeat(6_000_000) });
    s.streams.endAll();
    // The reader reads after 1.5 s: within its grace (3 s for 6 MB at a 2 MiB limit).
    await new Promise((r) => setTimeout(r, 1500));
    reader.res!.resume();
    await waitFor(() => reader.ended, 'the stream to end', 20_000);
    expect(reader.events).toHaveLength(2);
    expect((reader.events[1]!.data as { reason: string }).reason).toHaveLength(6_000_000);
    // The other one never read: it was cut, and what it finally reads stops short of the event.
    await new Promise((r) => setTimeout(r, 2500));
    idle.res!.resume();
    await waitFor(() => idle.ended, 'the cut stream to end', 20_000);
    expect(idle.events).toHaveLength(1);
  });
});
