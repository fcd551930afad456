import type { Logger, RedisLink } from '../scale/redis.js';
import { type EventBus, type EventHandler, LocalEventBus, type ServiceEvent } from './bus.js';

interface Envelope {
  /** Publishing instance: it delivered locally already and skips its own copy. */
  from: string;
  event: ServiceEvent;
}

const CHANNEL = 'events';

/**
 * Events across instances over Redis pub/sub. publish() delivers to this process's subscribers at
 * once and sends one copy to Redis; every other instance delivers it to its own subscribers. So each
 * instance sees every event exactly once, and local delivery does not depend on Redis being up.
 * publish() never waits: a Redis failure is logged (events are not buffered, by specification).
 */
export class RedisEventBus implements EventBus {
  private readonly local = new LocalEventBus();
  private lastErrorLog = 0;

  private constructor(
    private readonly link: RedisLink,
    private readonly log: Logger,
  ) {}

  static async create(link: RedisLink, log: Logger): Promise<RedisEventBus> {
    const bus = new RedisEventBus(link, log);
    await link.listen(CHANNEL, (message) => bus.receive(message));
    return bus;
  }

  private receive(message: string): void {
    let envelope: Envelope;
    try {
      envelope = JSON.parse(message) as Envelope;
    } catch {
      return;
    }
    if (envelope.from === this.link.instanceId || !envelope.event) return;
    this.local.deliver(envelope.event);
  }

  publish(event: ServiceEvent): void {
    this.local.deliver(event);
    const envelope: Envelope = { from: this.link.instanceId, event };
    this.link.publish(CHANNEL, JSON.stringify(envelope)).catch((err) => {
      // One line per 10 s at most: an outage must not flood the log at request rate.
      const now = Date.now();
      if (now - this.lastErrorLog < 10_000) return;
      this.lastErrorLog = now;
      this.log.error({ err }, 'event could not be published to Redis; other instances miss it');
    });
  }

  subscribe(handler: EventHandler): () => void {
    return this.local.subscribe(handler);
  }

  /** The connections belong to the RedisLink, which closes them. */
  async close(): Promise<void> {
    await this.local.close();
  }
}
