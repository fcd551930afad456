import type { EventBus, ServiceEvent } from './bus.js';

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

/** One open SSE or WebSocket connection as the hub sees it. */
export interface StreamClient {
  readonly kind: 'sse' | 'ws';
  /** Event types wanted; null = all. */
  readonly types: ReadonlySet<string> | null;
  /** Closed underneath us; the heartbeat removes such a connection. */
  readonly gone: boolean;
  /** Must not block: buffer or drop. */
  send(frames: Frames): void;
  /** Keep-alive and credential re-check, once per heartbeat interval of its transport. */
  heartbeat(): void;
  /** Ends the connection (server shutdown, credentials no longer valid). */
  close(reason: string): void;
}

/**
 * Fan-out from the bus to open connections, indexed by organization so an event costs work only for
 * the connections of its own organization. The bus handler only queues: sockets are written on the
 * next turn of the event loop, so a publisher (the validate request) never waits on the fan-out.
 */
export class EventHub {
  private readonly byOrg = new Map<string, Set<StreamClient>>();
  private readonly orgsOf = new Map<StreamClient, ReadonlySet<string>>();
  private queue: ServiceEvent[] = [];
  private scheduled = false;
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

  /** Registers (or re-registers with a new organization set) a connection. */
  set(client: StreamClient, organizations: Iterable<string>): void {
    this.detach(client);
    const orgs = new Set(organizations);
    this.orgsOf.set(client, orgs);
    for (const org of orgs) {
      let set = this.byOrg.get(org);
      if (!set) {
        set = new Set();
        this.byOrg.set(org, set);
      }
      set.add(client);
    }
  }

  private detach(client: StreamClient): void {
    const orgs = this.orgsOf.get(client);
    if (!orgs) return;
    for (const org of orgs) {
      const set = this.byOrg.get(org);
      set?.delete(client);
      if (set?.size === 0) this.byOrg.delete(org);
    }
    this.orgsOf.delete(client);
  }

  remove(client: StreamClient): void {
    this.detach(client);
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
    this.unsubscribe();
    for (const client of this.clients()) {
      try {
        client.close(reason);
      } catch {
        // Already gone.
      }
      this.remove(client);
    }
  }
}
