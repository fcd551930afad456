import type { FastifyReply, FastifyRequest } from 'fastify';
import { SseWriter } from '../../events/sse.js';
import { spreadOut } from '../../lib/spread.js';
import type { DecisionEnvelope } from './model.js';
import { McpStream, type Replayed, type ReplayLog, type StreamKey } from './replay.js';

export interface StreamOptions {
  /** The session the stream belongs to (its id is sent first), or null for a key-wide decision feed. */
  sessionId: string | null;
  /** The key the stream was opened with, and its organization: revoking either ends the stream at once. */
  holder: { keyId: string; organizationId: string };
  /** The stream's key, and the session's replay log its events are recorded in (null: not resumable). */
  key: StreamKey;
  log: ReplayLog | null;
  /** A resumption: the events missed since Last-Event-ID, written first (no `notifications/session` then). */
  replay?: Replayed[];
  subscribe: (handler: (e: DecisionEnvelope) => void) => () => void;
  /** Keeps the session alive while its stream is open. */
  touch: () => void;
  /**
   * At every ping: may the stream go on (key still valid, upstream still there and enabled)? False
   * ends the stream; a rejection (a store hiccup) keeps it until the next ping.
   */
  recheck: () => Promise<boolean>;
}

export interface StreamLimits {
  /** `:ping` interval, and the pace of the credential re-check (15 s). */
  pingMs: number;
  /** Unsent bytes beyond which the client is too slow and is dropped (1 MiB, as /v1/events/stream). */
  maxBufferedBytes: number;
  /**
   * Key-wide decision feeds (GET streams opened without a session) open at once per API key on this
   * instance, whatever the upstream; one more is refused until one of them ends.
   */
  feedsPerKey: number;
}

export const DEFAULT_STREAM_LIMITS: StreamLimits = {
  pingMs: 15_000,
  maxBufferedBytes: 1024 * 1024,
  feedsPerKey: 16,
};

/**
 * GET /v1/mcp/:upstreamSlug streams and the SSE answers of POSTs, all written through the service's
 * SseWriter. They are tracked so that closing the app ends them instead of waiting for their clients,
 * and GET streams are indexed by key and organization so that a revocation ends them at once. (A
 * POST's answer stream ends with its request, which fails when its session is ended.)
 */
export class EventStreams {
  private readonly open = new Map<SseWriter, string | null>();
  private readonly byKey = new Map<string, Set<SseWriter>>();
  private readonly byOrg = new Map<string, Set<SseWriter>>();
  /** Key-wide decision feeds open, per API key. */
  private readonly feeds = new Map<string, number>();
  /** Each GET stream's re-check of its key and upstream. */
  private readonly rechecks = new Map<SseWriter, () => Promise<boolean>>();

  constructor(readonly limits: StreamLimits = DEFAULT_STREAM_LIMITS) {}

  /**
   * Whether the key may open one more key-wide decision feed. Checked before `start`, with nothing
   * awaited in between: the feed counts from `start` until it ends, however it ends.
   */
  canOpenFeed(keyId: string): boolean {
    return (this.feeds.get(keyId) ?? 0) < this.limits.feedsPerKey;
  }

  /** Key-wide decision feeds of the key open now (tests, monitoring). */
  feedsOf(keyId: string): number {
    return this.feeds.get(keyId) ?? 0;
  }

  /** Hijacks the reply and opens an SSE stream on it, tracked until it ends. */
  writer(req: FastifyRequest, reply: FastifyReply, sessionId: string | null): SseWriter {
    reply.hijack();
    const writer = new SseWriter(reply.raw, this.limits.maxBufferedBytes);
    writer.open({ 'x-request-id': req.id, ...(sessionId ? { 'mcp-session-id': sessionId } : {}) });
    this.open.set(writer, sessionId);
    writer.onEnd(() => this.open.delete(writer));
    return writer;
  }

  /**
   * A GET stream. The session id comes first as a JSON-RPC notification (`notifications/session`,
   * default event type, which MCP clients parse as a message); the session's upstream messages
   * follow as messages, decisions as `event: decision` (MCP clients skip it, other consumers read it).
   * Every event has an id (resumable with Last-Event-ID on a session's stream). Comment pings every
   * pingMs, each followed by a re-check of the key and the upstream.
   */
  start(req: FastifyRequest, reply: FastifyReply, o: StreamOptions): McpStream {
    const writer = this.writer(req, reply, o.sessionId);
    const stream = new McpStream(o.key, o.log, writer);
    writer.write(':ok\n\n');
    for (const e of o.replay ?? []) writer.event(e.data, e.type, e.id);
    const unsubscribe = o.subscribe((e) => stream.send(JSON.stringify(e), 'decision'));
    const ping = setInterval(() => {
      o.touch();
      writer.heartbeat(o.recheck);
    }, this.limits.pingMs);
    ping.unref();
    const { keyId, organizationId } = o.holder;
    index(this.byKey, keyId).add(writer);
    index(this.byOrg, organizationId).add(writer);
    this.rechecks.set(writer, o.recheck);
    const feed = o.sessionId === null;
    if (feed) this.feeds.set(keyId, (this.feeds.get(keyId) ?? 0) + 1);
    writer.onEnd(() => {
      clearInterval(ping);
      unsubscribe();
      this.rechecks.delete(writer);
      unindex(this.byKey, keyId, writer);
      unindex(this.byOrg, organizationId, writer);
      if (feed) {
        const left = (this.feeds.get(keyId) ?? 1) - 1;
        if (left <= 0) this.feeds.delete(keyId);
        else this.feeds.set(keyId, left);
      }
    });
    // A revocation that came while the request was being checked found no stream to end: the key is
    // checked once more now that the stream can be found.
    writer.recheck(o.recheck);
    if (o.sessionId && !o.replay)
      stream.send(
        JSON.stringify({
          jsonrpc: '2.0',
          method: 'notifications/session',
          params: { sessionId: o.sessionId },
        }),
      );
    return stream;
  }

  /**
   * Every GET stream re-checks its key and upstream: revocations this instance could not be told of
   * (its Redis subscriber was away) end their streams within moments, not at the next ping. Spread
   * out (lib/spread.ts), so that many streams do not read the store at once.
   */
  recheckAll(): void {
    spreadOut(this.rechecks, ([writer, recheck]) => writer.recheck(recheck));
  }

  /** Open streams (tests, monitoring). */
  get size(): number {
    return this.open.size;
  }

  /** A session that ended (DELETE) ends its streams too. */
  endSession(sessionId: string): void {
    for (const [w, id] of [...this.open]) if (id === sessionId) w.close();
  }

  /** The GET streams of these keys (revoked or deleted). */
  endKeys(keyIds: Iterable<string>): void {
    for (const id of keyIds) for (const w of [...(this.byKey.get(id) ?? [])]) w.close();
  }

  /** The GET streams of an organization that was deleted. */
  endOrganization(organizationId: string): void {
    for (const w of [...(this.byOrg.get(organizationId) ?? [])]) w.close();
  }

  endAll(): void {
    for (const w of [...this.open.keys()]) w.close();
  }
}

function index(by: Map<string, Set<SseWriter>>, id: string): Set<SseWriter> {
  let set = by.get(id);
  if (!set) {
    set = new Set();
    by.set(id, set);
  }
  return set;
}

function unindex(by: Map<string, Set<SseWriter>>, id: string, writer: SseWriter): void {
  const set = by.get(id);
  set?.delete(writer);
  if (set?.size === 0) by.delete(id);
}
