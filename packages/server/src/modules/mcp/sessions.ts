import { uuidv7 } from '../../lib/ids.js';

/** Who may use a session: the key that opened it, on the upstream it was opened for. */
export interface SessionOwner {
  keyId: string;
  upstreamId: string;
}

export interface McpSession extends SessionOwner {
  id: string;
  lastSeen: number;
}

/** A decision of the gateway, as sent on GET /v1/mcp/:upstreamSlug streams. */
export interface DecisionEnvelope {
  type: 'decision';
  decisionId: string;
  sessionId: string;
  upstream: string;
  toolName: string;
  decision: string;
  reason: string;
  mode: string;
  latencyMs: number;
  receipt: unknown;
  approvalId?: string;
  createdAt: string;
}

export interface FeedEvent extends SessionOwner {
  sessionId: string;
  envelope: DecisionEnvelope;
}

/** A stream follows one session, or (opened without a session) every call of its key on the upstream. */
export type FeedFilter = { sessionId: string } | SessionOwner;

const IDLE_MS = 60 * 60_000;

export interface SessionLimits {
  /** Sessions of this instance in all. */
  total: number;
  /** Sessions of one API key: past it, the key's own oldest goes, so one key cannot evict the others'. */
  perKey: number;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = { total: 100_000, perKey: 1000 };

/**
 * MCP sessions of this instance, and the feed of gateway decisions for the GET streams. Sessions
 * live in memory: a session id is a policy session id (context.session_id), and its counters are in
 * the store, but the id itself is known only to the instance that issued it.
 */
export class McpSessions {
  private readonly sessions = new Map<string, McpSession>();
  /** Session ids by key, oldest first (Sets iterate in insertion order). */
  private readonly byKey = new Map<string, Set<string>>();
  private readonly listeners = new Set<{ filter: FeedFilter; handler: (e: DecisionEnvelope) => void }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly limits: SessionLimits = DEFAULT_SESSION_LIMITS,
  ) {
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  create(owner: SessionOwner): McpSession {
    const own = this.byKey.get(owner.keyId);
    // The key's own oldest goes first; only the global cap can touch other keys' sessions.
    if (own && own.size >= this.limits.perKey) this.remove(own.values().next().value!);
    if (this.sessions.size >= this.limits.total) {
      // Maps iterate in insertion order: the first entry is the oldest session.
      this.remove(this.sessions.keys().next().value!);
    }
    const session = { id: uuidv7(), ...owner, lastSeen: this.now() };
    this.sessions.set(session.id, session);
    let ids = this.byKey.get(owner.keyId);
    if (!ids) {
      ids = new Set();
      this.byKey.set(owner.keyId, ids);
    }
    ids.add(session.id);
    return session;
  }

  /** Sessions held (tests, monitoring). */
  get size(): number {
    return this.sessions.size;
  }

  private remove(id: string): void {
    const s = this.sessions.get(id);
    if (!s) return;
    this.sessions.delete(id);
    const ids = this.byKey.get(s.keyId);
    ids?.delete(id);
    if (ids?.size === 0) this.byKey.delete(s.keyId);
  }

  /** The session, if it exists and belongs to this key and upstream; another key's session is "not found". */
  get(id: string, owner: SessionOwner): McpSession | null {
    const s = this.sessions.get(id);
    if (!s || s.keyId !== owner.keyId || s.upstreamId !== owner.upstreamId) return null;
    s.lastSeen = this.now();
    return s;
  }

  delete(id: string, owner: SessionOwner): boolean {
    if (!this.get(id, owner)) return false;
    this.remove(id);
    return true;
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

  private sweep(): void {
    const cutoff = this.now() - IDLE_MS;
    for (const [id, s] of this.sessions) if (s.lastSeen < cutoff) this.remove(id);
  }

  close(): void {
    clearInterval(this.sweeper);
    this.sessions.clear();
    this.byKey.clear();
    this.listeners.clear();
  }
}
