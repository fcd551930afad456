/** One event of catalog A (dotted types), scoped to the organization it belongs to. */
export interface ServiceEvent {
  organizationId: string;
  type: string;
  data: Record<string, unknown>;
}

export type EventHandler = (event: ServiceEvent) => void;

/**
 * Publish/subscribe for service events. publish() never waits on subscribers: delivery to slow
 * consumers is their own buffering problem, never the caller's.
 */
export interface EventBus {
  publish(event: ServiceEvent): void;
  /** Receives every event of the process (and of every instance, when scaled out). */
  subscribe(handler: EventHandler): () => void;
  close(): Promise<void>;
}

/** The default bus: delivery inside this process only. */
export class LocalEventBus implements EventBus {
  private readonly handlers = new Set<EventHandler>();

  publish(event: ServiceEvent): void {
    this.deliver(event);
  }

  /** Delivers to local subscribers; a throwing subscriber cannot affect the others or the publisher. */
  deliver(event: ServiceEvent): void {
    for (const handler of this.handlers) {
      try {
        handler(event);
      } catch {
        // A subscriber's failure is its own; the event still reaches the rest.
      }
    }
  }

  subscribe(handler: EventHandler): () => void {
    this.handlers.add(handler);
    return () => {
      this.handlers.delete(handler);
    };
  }

  async close(): Promise<void> {
    this.handlers.clear();
  }
}
