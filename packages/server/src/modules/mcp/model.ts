import { DEFAULT_REPLAY_LIMITS, type ReplayLimits } from './replay.js';

/** Who may use a gateway session: the key that opened it, on the upstream it was opened for. */
export interface SessionOwner {
  keyId: string;
  upstreamId: string;
}

/** Who opens a session: its owner, and the organization of the key, whose share of the instance it takes. */
export interface SessionOpener extends SessionOwner {
  organizationId: string;
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

/**
 * Bounds on gateway sessions in one instance; each holds one upstream session (connections, state).
 * A new session never waits and is never refused for another tenant's sake: past a bound, the least
 * recently used session of whoever holds too many ends (its client gets 404 and initializes again,
 * as MCP prescribes). Only the upstream's own bound refuses.
 */
export interface SessionLimits {
  /**
   * Sessions of this instance in all; past it, the organization holding the most sessions (the
   * opener's own when no other holds more) loses its least recently used one.
   */
  total: number;
  /** Sessions of one API key: past it, the key's least recently used session is ended. */
  perKey: number;
  /**
   * Sessions of one organization (all its keys and upstreams): past it, the organization's least
   * recently used session is ended. Well below `total`, so one tenant, however many keys and
   * upstreams it makes, holds a tenth of an instance at most.
   */
  perOrganization: number;
  /** Upstream sessions open to one upstream (gateway sessions and session-less calls); past it, refused. */
  perUpstream: number;
  /** A session with no request and no open stream for this long is ended. */
  idleMs: number;
  /** Open GET streams per session. */
  streamsPerSession: number;
  /** Upstream messages held for a client with no open stream, oldest dropped first. */
  backlog: number;
  /** SSE events kept per session for resumption with Last-Event-ID. */
  replay: ReplayLimits;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = {
  total: 10_000,
  perKey: 100,
  perOrganization: 1000,
  perUpstream: 1000,
  idleMs: 15 * 60_000,
  streamsPerSession: 4,
  backlog: 256,
  replay: DEFAULT_REPLAY_LIMITS,
};

/** Bounds on what the gateway accepts from an upstream. */
export interface UpstreamLimits {
  /** One JSON answer, or one SSE event, in bytes. */
  maxMessageBytes: number;
  /** Nesting of objects/arrays in one message (the message itself is level 1). */
  maxDepth: number;
  /** Requests in flight in one upstream session. */
  maxInflight: number;
}

export const DEFAULT_UPSTREAM_LIMITS: UpstreamLimits = {
  maxMessageBytes: 8 * 1024 * 1024,
  maxDepth: 128,
  maxInflight: 100,
};
