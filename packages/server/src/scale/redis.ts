import { randomUUID } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';

export interface Logger {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

type MessageHandler = (message: string) => void;

/**
 * How often the subscriber connection is pinged, and how long an answer may take. A connection
 * that died without a FIN (a partition, a host gone) reports no `close` for as long as TCP
 * keepalive takes (hours by default); meanwhile messages are missed, so the check treats a missing
 * pong as a lost connection (see onDisconnect) and reconnects.
 */
export interface SubscriberCheck {
  everyMs: number;
  timeoutMs: number;
}
const SUBSCRIBER_CHECK: SubscriberCheck = { everyMs: 5000, timeoutMs: 2000 };

const OPTIONS: RedisOptions = {
  lazyConnect: true,
  connectTimeout: 5000,
  // Fail a command fast while Redis is away instead of queueing the hot path for seconds.
  maxRetriesPerRequest: 1,
  retryStrategy: (times) => Math.min(times * 100, 2000),
};

/**
 * The two Redis connections of one process: `commands` (counters, PUBLISH) and a subscriber
 * (a connection in subscribe mode can run nothing else). Every key and channel starts with the
 * configured prefix, so deployments and test runs can share one Redis.
 */
export class RedisLink {
  private readonly handlers = new Map<string, MessageHandler>();
  private readonly reconnectHandlers: Array<() => void> = [];
  private readonly disconnectHandlers: Array<() => void> = [];
  private dropped = false;
  private closing = false;
  private readonly checker: NodeJS.Timeout;

  private constructor(
    /** Identifies this process in messages, so it can skip its own. */
    readonly instanceId: string,
    readonly commands: Redis,
    private readonly subscriber: Redis,
    readonly prefix: string,
    private readonly log: Logger,
    check: SubscriberCheck,
  ) {
    subscriber.on('message', (channel: string, message: string) => {
      try {
        this.handlers.get(channel)?.(message);
      } catch (err) {
        log.error({ err, channel }, 'redis message handler failed');
      }
    });
    subscriber.on('close', () => this.lost('redis subscriber connection lost; reconnecting'));
    subscriber.on('ready', () => void this.resubscribe());
    // ioredis reports connection errors as events; without a listener they would crash the process.
    for (const c of [commands, subscriber]) c.on('error', () => {});
    this.checker = setInterval(() => void this.checkSubscriber(check.timeoutMs), check.everyMs);
    this.checker.unref();
  }

  /** From now on messages may be missed: the disconnect handlers run once, until resubscribed. */
  private lost(why: string): void {
    if (this.closing || this.dropped) return;
    this.log.warn({}, why);
    this.dropped = true;
    for (const h of this.disconnectHandlers) h();
  }

  /** Pings the subscriber; no pong in time: the connection is taken as lost and made again. */
  private async checkSubscriber(timeoutMs: number): Promise<void> {
    if (this.closing || this.dropped) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((r) => {
      timer = setTimeout(() => r('late'), timeoutMs);
    });
    const answer = await Promise.race([this.subscriber.ping().then(() => 'pong' as const), late]).catch(
      () => 'failed' as const,
    );
    clearTimeout(timer);
    if (answer === 'pong' || this.closing || this.dropped) return;
    this.lost(`redis subscriber connection did not answer a ping within ${timeoutMs} ms; reconnecting`);
    // A fresh connection: its 'ready' resubscribes, and the reconnect handlers run.
    this.subscriber.disconnect(true);
  }

  static async connect(
    url: string,
    prefix: string,
    log: Logger,
    check: SubscriberCheck = SUBSCRIBER_CHECK,
  ): Promise<RedisLink> {
    const id = randomUUID();
    // Named, so an operator can tell the connections apart in CLIENT LIST.
    const commands = new Redis(url, { ...OPTIONS, enableAutoPipelining: true, connectionName: `svc-${id}` });
    // Resubscription is done by hand, so that it is known when it completed (see resubscribe).
    const subscriber = new Redis(url, {
      ...OPTIONS,
      autoResubscribe: false,
      connectionName: `svc-sub-${id}`,
    });
    try {
      await Promise.all([commands.connect(), subscriber.connect()]);
    } catch (err) {
      commands.disconnect();
      subscriber.disconnect();
      throw new Error(`cannot connect to Redis (SVC_REDIS_URL): ${(err as Error).message}`);
    }
    return new RedisLink(id, commands, subscriber, prefix, log, check);
  }

  key(...parts: string[]): string {
    return this.prefix + parts.join(':');
  }

  /** Subscribes before resolving: no message published after this returns is missed. */
  async listen(channel: string, handler: MessageHandler): Promise<void> {
    const name = this.key('ch', channel);
    this.handlers.set(name, handler);
    await this.subscriber.subscribe(name);
  }

  publish(channel: string, message: string): Promise<number> {
    return this.commands.publish(this.key('ch', channel), message);
  }

  /**
   * After a lost subscriber connection, messages published meanwhile are gone: callers register what
   * to do then (drop caches that may have missed an invalidation).
   */
  onReconnect(handler: () => void): void {
    this.reconnectHandlers.push(handler);
  }

  /** When the subscriber connection is lost: from then on messages may be missed until onReconnect. */
  onDisconnect(handler: () => void): void {
    this.disconnectHandlers.push(handler);
  }

  private async resubscribe(): Promise<void> {
    if (!this.dropped || this.closing) return;
    try {
      if (this.handlers.size > 0) await this.subscriber.subscribe(...this.handlers.keys());
      this.dropped = false;
      this.log.info({}, 'redis subscriber reconnected');
      for (const h of this.reconnectHandlers) h();
    } catch (err) {
      this.log.error({ err }, 'redis resubscribe failed; retrying on the next reconnect');
    }
  }

  async ping(): Promise<void> {
    await this.commands.ping();
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.checker);
    await Promise.allSettled([this.subscriber.quit(), this.commands.quit()]);
  }
}
