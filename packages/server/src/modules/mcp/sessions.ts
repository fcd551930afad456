import { uuidv7 } from '../../lib/ids.js';
import { isObject, type RpcId } from './jsonrpc.js';
import {
  DEFAULT_SESSION_LIMITS,
  type DecisionEnvelope,
  type FeedEvent,
  type FeedFilter,
  type SessionLimits,
  type SessionOpener,
  type SessionOwner,
} from './model.js';
import { type McpStream, type ReplayBudget, type Replayed, ReplayLog, type StreamKey } from './replay.js';
import type { PendingReply, ReplyHost } from './reply.js';
import type { UpstreamMessage, UpstreamSession } from './upstream-session.js';

/** A client request in flight: where its related messages go, and its id upstream. */
interface InFlight {
  reply: PendingReply;
  progressToken: unknown;
  upstreamId: number | null;
  /** The client cancelled it before it was sent upstream (at its policy check): the reason it gave. */
  cancelled: string | null;
}

/** Requests of the upstream awaiting the client's answer, per session. */
const MAX_SERVER_REQUESTS = 100;

const idKey = (id: RpcId) => (typeof id === 'number' ? `n${id}` : `s${id}`);

/**
 * One client's MCP session through the gateway, and the one upstream session behind it. Messages
 * the upstream sends by itself go to this client only: progress to the request that asked for it,
 * requests (sampling, elicitation, roots) to a request in flight or the GET stream, other
 * notifications to the GET stream, else they wait (bounded) until the client opens one.
 */
export class GatewaySession implements ReplyHost {
  upstream: UpstreamSession | null = null;
  /** The protocol version the upstream agreed to at initialize (set with `upstream`). */
  protocolVersion: string | null = null;
  /**
   * The `updated_at` of the upstream configuration the session was opened with: a change made on
   * another instance (which cannot end this instance's sessions) shows as another value.
   */
  configuredAt: string | null = null;
  lastSeen: number;
  closed = false;
  /** Every SSE event of the session (POST answers and GET streams), for resumption. */
  readonly log: ReplayLog;
  private readonly inflight = new Map<RpcId, InFlight>();
  private readonly serverRequests = new Set<string>();
  private readonly streams: McpStream[] = [];
  /** POST replies answered as a stream whose response is still to come: resumable onto a new connection. */
  private readonly live = new Map<StreamKey, PendingReply>();
  private backlog: UpstreamMessage[] = [];

  constructor(
    readonly id: string,
    readonly owner: SessionOpener,
    private readonly limits: SessionLimits,
    now: number,
    budget: ReplayBudget = { used: 0 },
  ) {
    this.lastSeen = now;
    this.log = new ReplayLog(limits.replay, budget);
  }

  track(key: StreamKey, reply: PendingReply): void {
    this.live.set(key, reply);
  }

  untrack(key: StreamKey): void {
    this.live.delete(key);
  }

  /**
   * What a GET with Last-Event-ID resumes: the stream the id names, its events after the id, and
   * for a POST answer still waiting for its response, that reply. Null when the id is not this
   * session's or events after it are no longer held.
   */
  resume(
    lastEventId: string,
  ): { stream: StreamKey; kind: 'g' | 'p'; events: Replayed[]; reply: PendingReply | null } | null {
    const found = this.log.after(lastEventId);
    if (!found) return null;
    return { ...found, reply: this.live.get(found.stream) ?? null };
  }

  /** Closes the open GET stream with this key (a resumption replaces its connection). */
  replaceStream(key: StreamKey): void {
    for (const s of [...this.streams]) if (s.key === key) s.writer.close();
  }

  /** Registers a client request; false if that id is already in flight (a JSON-RPC id must be unique). */
  begin(id: RpcId, reply: PendingReply, progressToken: unknown): boolean {
    if (this.inflight.has(id)) return false;
    this.inflight.set(id, { reply, progressToken, upstreamId: null, cancelled: null });
    return true;
  }

  sentAs(id: RpcId, upstreamId: number): void {
    const f = this.inflight.get(id);
    if (f) f.upstreamId = upstreamId;
  }

  /** The upstream id of a client request in flight (for notifications/cancelled). */
  upstreamIdOf(id: RpcId): number | null {
    return this.inflight.get(id)?.upstreamId ?? null;
  }

  /**
   * The client cancelled a request of this session that was not sent upstream yet (a tools/call at
   * its policy check): it will not be sent. Nothing for an id not in flight or already sent.
   */
  cancelUnsent(id: RpcId, reason: string): void {
    const f = this.inflight.get(id);
    if (f && f.upstreamId === null && f.cancelled === null) f.cancelled = reason;
  }

  /** Why the client cancelled this request before it was sent upstream, or null if it did not. */
  cancelledUnsent(id: RpcId): string | null {
    return this.inflight.get(id)?.cancelled ?? null;
  }

  end(id: RpcId): void {
    this.inflight.delete(id);
  }

  /** Whether the client's response answers an upstream request still waiting (it is then forwarded). */
  answers(id: RpcId): boolean {
    return this.serverRequests.delete(idKey(id));
  }

  /** Routes one upstream message to this client; false when the upstream has too many requests waiting. */
  deliver(msg: UpstreamMessage): boolean {
    const isRequest = msg.id !== undefined;
    if (isRequest) {
      if (this.serverRequests.size >= MAX_SERVER_REQUESTS) return false;
      this.serverRequests.add(idKey(msg.id!));
    }
    if (msg.method === 'notifications/cancelled' && isObject(msg.params)) {
      const rid = msg.params.requestId;
      if (typeof rid === 'string' || typeof rid === 'number') this.serverRequests.delete(idKey(rid));
    }
    if (msg.method === 'notifications/progress' && isObject(msg.params)) {
      const token = msg.params.progressToken;
      for (const f of this.inflight.values())
        if (
          f.upstreamId !== null &&
          f.progressToken !== undefined &&
          f.progressToken === token &&
          f.reply.push(msg)
        )
          return true;
    }
    if (isRequest && this.toInflight(msg)) return true;
    if (this.toStream(msg)) return true;
    if (!isRequest && this.toInflight(msg)) return true;
    this.backlog.push(msg);
    if (this.backlog.length > this.limits.backlog) {
      // A request dropped unseen is no longer waiting for this client's answer.
      const dropped = this.backlog.shift()!;
      if (dropped.id !== undefined) this.serverRequests.delete(idKey(dropped.id));
    }
    return true;
  }

  /**
   * To the answer stream of the latest request that reached the upstream: one still at its policy
   * check (its id taken, nothing sent) may never be forwarded, and must not carry the upstream's
   * messages.
   */
  private toInflight(msg: UpstreamMessage): boolean {
    const all = [...this.inflight.values()];
    for (let i = all.length - 1; i >= 0; i--) {
      const f = all[i]!;
      if (f.upstreamId !== null && f.reply.push(msg)) return true;
    }
    return false;
  }

  private toStream(msg: UpstreamMessage): boolean {
    const data = JSON.stringify(msg);
    for (let i = this.streams.length - 1; i >= 0; i--) {
      if (this.streams[i]!.send(data)) return true;
      this.streams.splice(i, 1);
    }
    return false;
  }

  /** Whether one more GET stream is within the per-session bound. */
  canAddStream(): boolean {
    for (let i = this.streams.length - 1; i >= 0; i--)
      if (this.streams[i]!.writer.gone) this.streams.splice(i, 1);
    return this.streams.length < this.limits.streamsPerSession;
  }

  /** A GET stream of this client (new or resumed): what waited for one goes out on it. */
  addStream(stream: McpStream): void {
    this.streams.push(stream);
    stream.writer.onEnd(() => {
      const i = this.streams.indexOf(stream);
      if (i >= 0) this.streams.splice(i, 1);
    });
    const waiting = this.backlog;
    this.backlog = [];
    for (const msg of waiting) if (!stream.send(JSON.stringify(msg))) this.backlog.push(msg);
  }

  idle(cutoff: number): boolean {
    return this.lastSeen < cutoff && this.inflight.size === 0 && !this.streams.some((s) => !s.writer.gone);
  }

  /** Ends the session: streams end, the upstream session is closed (which fails requests in flight). */
  close(_reason: string): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    // Requests in flight are answered by their own dispatch: closing the upstream session fails
    // them, and a tool call is recorded before its answer.
    for (const s of this.streams.splice(0)) s.writer.close();
    this.backlog = [];
    this.live.clear();
    this.log.clear();
    return this.upstream?.close() ?? Promise.resolve();
  }
}

/**
 * A request made without a session, while it is in progress: it runs in an upstream session of its
 * own, which ends, as a gateway session's does, when its API key is revoked or its organization
 * deleted. A request whose key is revoked before it was sent upstream is not sent.
 */
export class StatelessRequest {
  /** Why the request was ended (its key revoked…), or null. */
  ended: string | null = null;
  private upstream: UpstreamSession | null = null;

  constructor(
    readonly keyId: string,
    readonly organizationId: string,
    private readonly untrack: (r: StatelessRequest) => void,
  ) {}

  /** The upstream session the request runs in; false when the request was ended meanwhile. */
  attach(upstream: UpstreamSession): boolean {
    if (this.ended !== null) return false;
    this.upstream = upstream;
    return true;
  }

  /** Ends the request: its upstream session, if open, fails what is in flight with `reason` and closes. */
  end(reason: string): Promise<void> {
    if (this.ended !== null) return Promise.resolve();
    this.ended = reason;
    this.untrack(this);
    const upstream = this.upstream;
    if (!upstream) return Promise.resolve();
    upstream.fail(reason);
    return upstream.close();
  }

  /** The request is over: nothing to end any more. */
  release(): void {
    this.untrack(this);
  }
}

/**
 * The gateway sessions of this instance, with their bounds, and the feed of gateway decisions for
 * the GET streams. Sessions live in memory: each holds a live upstream connection, so a session is
 * served only by the instance that opened it (sticky routing).
 *
 * No tenant can take the sessions of another: a key past its bound, or an organization past its
 * own, loses its own least recently used session; a full instance takes one from the organization
 * holding the most. Only the upstream's bound refuses (it protects the upstream server, which is
 * the organization's own).
 */
export class McpSessions {
  private readonly sessions = new Map<string, GatewaySession>();
  /** Session ids by key and by organization, least recently used first (a Set keeps insertion order; use re-inserts). */
  private readonly byKey = new Map<string, Set<string>>();
  private readonly byOrg = new Map<string, Set<string>>();
  /** Upstream sessions open per upstream (gateway sessions and session-less calls). */
  private readonly slots = new Map<string, number>();
  private readonly listeners = new Set<{ filter: FeedFilter; handler: (e: DecisionEnvelope) => void }>();
  private readonly sweeper: NodeJS.Timeout;
  /** What all the sessions' replay logs hold, against limits.replay.totalBytes. */
  readonly replayBudget: ReplayBudget = { used: 0 };

  constructor(
    private readonly now: () => number = Date.now,
    readonly limits: SessionLimits = DEFAULT_SESSION_LIMITS,
  ) {
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, limits.idleMs));
    this.sweeper.unref();
  }

  /**
   * A new session, or the reason it cannot be opened (the upstream's bound reached). Past the
   * key's, the organization's or the instance's bound, a session makes room by ending one: the
   * key's own least recently used, the organization's own, then that of the organization holding
   * the most sessions. Nothing is ended for a session that is then refused.
   */
  create(opener: SessionOpener): GatewaySession | string {
    const victims: { id: string; reason: string }[] = [];
    const taken = new Set<string>();
    const pick = (ids: Set<string> | undefined, reason: string): boolean => {
      for (const id of ids ?? [])
        if (!taken.has(id)) {
          taken.add(id);
          victims.push({ id, reason });
          return true;
        }
      return false;
    };
    const held = (ids: Set<string> | undefined) => {
      if (!ids) return 0;
      let n = ids.size;
      for (const id of taken) if (ids.has(id)) n--;
      return n;
    };
    const ownKey = this.byKey.get(opener.keyId);
    if (held(ownKey) >= this.limits.perKey)
      pick(ownKey, `more than ${this.limits.perKey} sessions of this API key`);
    const ownOrg = this.byOrg.get(opener.organizationId);
    if (held(ownOrg) >= this.limits.perOrganization)
      pick(ownOrg, `more than ${this.limits.perOrganization} sessions of this organization`);
    if (this.sessions.size - victims.length >= this.limits.total) {
      const own = held(ownOrg);
      const largest = this.largestOrganization(opener.organizationId);
      // Another organization gives one up when it keeps at least as many as the opener then holds,
      // or when the opener holds none: a tenant under its share is never refused for others' sake.
      const from =
        largest && (largest.held - 1 >= own + 1 || own === 0)
          ? this.byOrg.get(largest.organizationId)
          : ownOrg;
      const reason = `this instance holds its maximum of ${this.limits.total} MCP sessions`;
      if (!pick(from, reason)) return reason;
    }
    const freed = victims.filter((v) => this.sessions.get(v.id)?.owner.upstreamId === opener.upstreamId);
    if ((this.slots.get(opener.upstreamId) ?? 0) - freed.length >= this.limits.perUpstream)
      return `the upstream has its maximum of ${this.limits.perUpstream} sessions open on this instance`;
    for (const v of victims) void this.end(v.id, v.reason);
    const release = this.slot(opener.upstreamId)!;
    const session = new GatewaySession(uuidv7(), opener, this.limits, this.now(), this.replayBudget);
    this.sessions.set(session.id, session);
    index(this.byKey, opener.keyId).add(session.id);
    index(this.byOrg, opener.organizationId).add(session.id);
    this.releases.set(session.id, release);
    return session;
  }

  /**
   * The organization holding the most sessions other than `except`, scanned only when the instance
   * is full (one step per organization holding sessions).
   */
  private largestOrganization(except: string): { organizationId: string; held: number } | null {
    let best: { organizationId: string; held: number } | null = null;
    for (const [organizationId, ids] of this.byOrg)
      if (organizationId !== except && (!best || ids.size > best.held))
        best = { organizationId, held: ids.size };
    return best;
  }

  private readonly releases = new Map<string, () => void>();
  /** Session-less requests in progress, ended with their key or organization. */
  private readonly stateless = new Set<StatelessRequest>();

  /** Tracks a session-less request of this key until its `release`, so that revoking the key ends it. */
  beginStateless(holder: { keyId: string; organizationId: string }): StatelessRequest {
    const r = new StatelessRequest(holder.keyId, holder.organizationId, (done) =>
      this.stateless.delete(done),
    );
    this.stateless.add(r);
    return r;
  }

  /** Takes one upstream-session slot of the upstream; the release function, or null at the bound. */
  slot(upstreamId: string): (() => void) | null {
    const n = this.slots.get(upstreamId) ?? 0;
    if (n >= this.limits.perUpstream) return null;
    this.slots.set(upstreamId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.slots.get(upstreamId) ?? 1) - 1;
      if (left <= 0) this.slots.delete(upstreamId);
      else this.slots.set(upstreamId, left);
    };
  }

  /** Sessions held (tests, monitoring). */
  get size(): number {
    return this.sessions.size;
  }

  /** The session, if it exists and belongs to this key and upstream; another key's session is "not found". */
  get(id: string, owner: SessionOwner): GatewaySession | null {
    const s = this.sessions.get(id);
    if (!s || s.owner.keyId !== owner.keyId || s.owner.upstreamId !== owner.upstreamId) return null;
    s.lastSeen = this.now();
    for (const ids of [this.byKey.get(s.owner.keyId), this.byOrg.get(s.owner.organizationId)]) {
      ids?.delete(id);
      ids?.add(id);
    }
    return s;
  }

  delete(id: string, owner: SessionOwner): boolean {
    if (!this.get(id, owner)) return false;
    void this.end(id, 'the client ended it');
    return true;
  }

  /** Ends a session for any reason (client, idle, eviction, upstream gone, key revoked). */
  end(id: string, reason: string): Promise<void> {
    const s = this.sessions.get(id);
    if (!s) return Promise.resolve();
    this.sessions.delete(id);
    unindex(this.byKey, s.owner.keyId, id);
    unindex(this.byOrg, s.owner.organizationId, id);
    this.releases.get(id)?.();
    this.releases.delete(id);
    return s.close(reason);
  }

  /** Every session of an upstream whose configuration changed or that was deleted. */
  endUpstream(upstreamId: string, reason: string): void {
    for (const [id, s] of [...this.sessions])
      if (s.owner.upstreamId === upstreamId) void this.end(id, reason);
  }

  /**
   * Every session of these keys (revoked or deleted), as DELETE would end it: its upstream session
   * is closed too, its requests in flight fail and its streams end. Resolves once the upstream
   * sessions are closed.
   */
  endKeys(keyIds: Iterable<string>, reason: string): Promise<void> {
    const keys = new Set(keyIds);
    const ended: Promise<void>[] = [];
    for (const keyId of keys)
      for (const id of [...(this.byKey.get(keyId) ?? [])]) ended.push(this.end(id, reason));
    // Session-less requests in progress of these keys end too.
    for (const r of [...this.stateless]) if (keys.has(r.keyId)) ended.push(r.end(reason));
    return Promise.all(ended).then(() => {});
  }

  /** Every session (and session-less request in progress) of an organization that was deleted. */
  endOrganization(organizationId: string, reason: string): Promise<void> {
    const ids = [...(this.byOrg.get(organizationId) ?? [])];
    const ended = ids.map((id) => this.end(id, reason));
    for (const r of [...this.stateless]) if (r.organizationId === organizationId) ended.push(r.end(reason));
    return Promise.all(ended).then(() => {});
  }

  publish(event: FeedEvent): void {
    for (const l of this.listeners) {
      const f = l.filter;
      const match =
        'sessionId' in f
          ? f.sessionId === event.sessionId
          : f.keyId === event.keyId && f.upstreamId === event.upstreamId;
      if (!match) continue;
      try {
        l.handler(event.envelope);
      } catch {
        // One broken stream must not keep the others from their events.
      }
    }
  }

  subscribe(filter: FeedFilter, handler: (e: DecisionEnvelope) => void): () => void {
    const l = { filter, handler };
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }

  sweep(): void {
    const cutoff = this.now() - this.limits.idleMs;
    for (const [id, s] of [...this.sessions]) if (s.idle(cutoff)) void this.end(id, 'idle');
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.listeners.clear();
    await Promise.all([...this.sessions.keys()].map((id) => this.end(id, 'the gateway is shutting down')));
  }
}

/** The set of session ids under `id`, made if absent. */
function index(by: Map<string, Set<string>>, id: string): Set<string> {
  let ids = by.get(id);
  if (!ids) {
    ids = new Set();
    by.set(id, ids);
  }
  return ids;
}

function unindex(by: Map<string, Set<string>>, id: string, sessionId: string): void {
  const ids = by.get(id);
  ids?.delete(sessionId);
  if (ids?.size === 0) by.delete(id);
}
