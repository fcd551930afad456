import { spreadOut } from '../lib/spread.js';
import type { EventBus, ServiceEvent } from './bus.js';
import { CheckRound } from './checks.js';

/** An event serialised once per wire format, however many connections receive it. */
export class Frames {
  private sseFrame: string | null = null;
  private wsFrame: string | null = null;

  constructor(readonly event: ServiceEvent) {}

  get sse(): string {
    this.sseFrame ??= `event: ${this.event.type}\ndata: ${JSON.stringify(this.event.data)}\n\n`;
    return this.sseFrame;
  }

  get ws(): string {
    this.wsFrame ??= JSON.stringify({ type: this.event.type, data: this.event.data });
    return this.wsFrame;
  }
}

/**
 * The revocable credential a connection was opened with: an API key, or a dashboard session (its
 * sessionKey). A bearer token (JWT) cannot be revoked, so a connection opened with one has neither.
 */
export interface StreamHolder {
  keyId?: string;
  session?: string;
}

/** One open SSE or WebSocket connection as the hub sees it. */
export interface StreamClient {
  readonly kind: 'sse' | 'ws';
  /** Revoking this credential (or signing this session out) ends the connection at once. */
  readonly holder?: StreamHolder;
  /** Event types wanted; null = all. */
  readonly types: ReadonlySet<string> | null;
  /** Closed underneath us; the heartbeat removes such a connection. */
  readonly gone: boolean;
  /** Must not block: buffer or drop. */
  send(frames: Frames): void;
  /** Keep-alive, once per heartbeat interval of its transport (its re-check follows: EventHub.heartbeat). */
  heartbeat(): void;
  /**
   * Re-checks the credentials now; the connection ends if they no longer hold. The store reads of a
   * `round` are shared with the other connections checked in it; without one they are its own.
   */
  checkCredentials(round?: CheckRound): void;
  /** Ends the connection (server shutdown, credentials no longer valid). */
  close(reason: string): void;
}

/**
 * Fan-out from the bus to open connections, indexed by organization so an event costs work only for
 * the connections of its own organization. The bus handler only queues: sockets are written on the
 * next turn of the event loop, so a publisher (the validate request) never waits on the fan-out.
 *
 * Connections are also indexed by the API key and the dashboard session they were opened with, so
 * that a revocation or a sign-out ends them at once (the heartbeat re-check stays as a backstop).
 */
export class EventHub {
  private readonly byOrg = new Map<string, Set<StreamClient>>();
  private readonly orgsOf = new Map<StreamClient, ReadonlySet<string>>();
  private readonly byKey = new Map<string, Set<StreamClient>>();
  private readonly bySession = new Map<string, Set<StreamClient>>();
  private queue: ServiceEvent[] = [];
  private scheduled = false;
  /** Set by close(): the heartbeats have stopped and nothing is delivered any more. */
  private closedWith: string | null = null;
  private readonly unsubscribe: () => void;

  constructor(bus: EventBus) {
    this.unsubscribe = bus.subscribe((event) => this.enqueue(event));
  }

  private enqueue(event: ServiceEvent): void {
    if (!this.byOrg.has(event.organizationId)) return;
    this.queue.push(event);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    const events = this.queue;
    this.queue = [];
    for (const event of events) {
      const clients = this.byOrg.get(event.organizationId);
      if (!clients) continue;
      const frames = new Frames(event);
      // A copy: send() may drop a slow client, which removes it from the set.
      for (const client of [...clients]) {
        if (client.types && !client.types.has(event.type)) continue;
        try {
          client.send(frames);
        } catch {
          // A failing connection is its own problem; the others still get the event.
        }
      }
    }
  }

  /**
   * Registers (or re-registers with a new organization set) a connection. Once the hub is closed
   * (shutdown), a connection whose opening was still under way is ended instead: registered, it
   * would get no event and no heartbeat, and would hold the server's close open for as long as its
   * client stays.
   */
  set(client: StreamClient, organizations: Iterable<string>): void {
    if (this.closedWith !== null) {
      this.end([client], this.closedWith);
      return;
    }
    const known = this.orgsOf.has(client);
    this.detach(client);
    const orgs = new Set(organizations);
    this.orgsOf.set(client, orgs);
    for (const org of orgs) add(this.byOrg, org, client);
    if (!known) {
      if (client.holder?.keyId !== undefined) add(this.byKey, client.holder.keyId, client);
      if (client.holder?.session !== undefined) add(this.bySession, client.holder.session, client);
    }
  }

  private detach(client: StreamClient): void {
    const orgs = this.orgsOf.get(client);
    if (!orgs) return;
    for (const org of orgs) drop(this.byOrg, org, client);
    this.orgsOf.delete(client);
  }

  remove(client: StreamClient): void {
    if (!this.orgsOf.has(client)) return;
    this.detach(client);
    if (client.holder?.keyId !== undefined) drop(this.byKey, client.holder.keyId, client);
    if (client.holder?.session !== undefined) drop(this.bySession, client.holder.session, client);
  }

  /** Ends the connections opened with these API keys (revoked or deleted). */
  endKeys(keyIds: Iterable<string>, reason: string): void {
    for (const id of keyIds) this.end(this.byKey.get(id), reason);
  }

  /** Ends the connections opened with this dashboard session (signed out). */
  endSession(session: string, reason: string): void {
    this.end(this.bySession.get(session), reason);
  }

  /**
   * An organization was deleted: a stream of that organization (SSE follows one) ends; a WebSocket,
   * which follows all of its user's organizations, stays and delivers none of that one's events.
   */
  endOrganization(organizationId: string, reason: string): void {
    for (const client of [...(this.byOrg.get(organizationId) ?? [])]) {
      const rest = [...(this.orgsOf.get(client) ?? [])].filter((o) => o !== organizationId);
      if (client.kind === 'ws') this.set(client, rest);
      else this.end([client], reason);
    }
  }

  private end(clients: Iterable<StreamClient> | undefined, reason: string): void {
    if (!clients) return;
    // A copy: removing a client changes the set it came from.
    for (const client of [...clients]) {
      try {
        client.close(reason);
      } catch {
        // Already gone.
      }
      this.remove(client);
    }
  }

  /**
   * Every connection re-checks its credentials: revocations and sign-outs that could not be told
   * (they came while this instance's Redis subscriber was away) end their connections within moments.
   * The checks are spread out (lib/spread.ts), so that thousands of streams do not read the store at
   * once, and are one round (CheckRound): the connections of one identity share its reads.
   */
  checkCredentials(): void {
    this.checkRound(this.clients());
  }

  /**
   * A heartbeat of one transport. Every open connection gets its keep-alive at once and re-checks its
   * credentials soon after, spread out like checkCredentials and in one round: however many streams
   * one person holds, the heartbeat reads the person's membership (a WebSocket: memberships; a
   * dashboard stream: session) once, at a moment of its own, instead of once per stream all in the
   * same instant, where they would queue for the store ahead of every other request. A check then
   * comes within 2 ms per connection (10 s at most) after its heartbeat. Connections closed
   * underneath are removed.
   */
  heartbeat(kind: StreamClient['kind']): void {
    const live: StreamClient[] = [];
    for (const client of this.clients(kind)) {
      if (client.gone) this.remove(client);
      else {
        client.heartbeat();
        live.push(client);
      }
    }
    this.checkRound(live);
  }

  private checkRound(clients: StreamClient[]): void {
    const round = new CheckRound();
    spreadOut(clients, (client) => client.checkCredentials(round));
  }

  clients(kind?: StreamClient['kind']): StreamClient[] {
    const all = [...this.orgsOf.keys()];
    return kind ? all.filter((c) => c.kind === kind) : all;
  }

  /** Open connections (monitoring). */
  get size(): number {
    return this.orgsOf.size;
  }

  /** Ends every connection (shutdown) and stops listening to the bus. */
  close(reason = 'server shutting down'): void {
    this.closedWith = reason;
    this.unsubscribe();
    this.end(this.clients(), reason);
  }
}

function add(index: Map<string, Set<StreamClient>>, id: string, client: StreamClient): void {
  let set = index.get(id);
  if (!set) {
    set = new Set();
    index.set(id, set);
  }
  set.add(client);
}

function drop(index: Map<string, Set<StreamClient>>, id: string, client: StreamClient): void {
  const set = index.get(id);
  set?.delete(client);
  if (set?.size === 0) index.delete(id);
}
