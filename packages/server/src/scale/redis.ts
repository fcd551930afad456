import { randomUUID } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import { settlesWithin } from '../lib/deadline.js';

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

/**
 * How long a Redis command may wait for its answer. Every command the service sends (counters, rate
 * limits, PUBLISH) takes well under a millisecond; past this, the caller fails closed (503) instead
 * of waiting for as long as Redis is away (a partition sends no error at all).
 */
export const REDIS_COMMAND_TIMEOUT_MS = 2000;
/**
 * How long connecting may take at start: TCP, TLS, authentication, SELECT and the ready check. Past
 * it the start fails with a message naming SVC_REDIS_URL (a Redis that accepts the connection but
 * never answers would otherwise hold the start forever, silently).
 */
export const REDIS_CONNECT_TIMEOUT_MS = 5000;

const OPTIONS: RedisOptions = {
  lazyConnect: true,
  connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
  commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
  // Fail a command fast while Redis is away instead of queueing the hot path for seconds.
  maxRetriesPerRequest: 1,
  retryStrategy: (times) => Math.min(times * 100, 2000),
  keepAlive: 10_000,
};

export interface RedisLinkOptions {
  check?: SubscriberCheck;
  /** Default REDIS_COMMAND_TIMEOUT_MS. */
  commandTimeoutMs?: number;
  /** Default REDIS_CONNECT_TIMEOUT_MS. */
  connectTimeoutMs?: number;
}

/** The URL without its password, for messages. */
export function describeRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    const user = u.username ? `${u.username}@` : u.password ? '***@' : '';
    return `${u.protocol}//${user}${u.host}${u.pathname}`;
  } catch {
    return '(not a URL)';
  }
}

/** Refuses what ioredis would misread: another scheme, a database that is not a number. */
function checkRedisUrl(url: string): void {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error('SVC_REDIS_URL must be a URL such as redis://host:6379 (or rediss:// for TLS)');
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw new Error(`SVC_REDIS_URL must start with redis:// or rediss://, got ${describeRedisUrl(url)}`);
  }
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) {
    throw new Error(`SVC_REDIS_URL names database "${db}": the path must be a database number (e.g. /0)`);
  }
}

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
  /** A resubscription is under way (on 'ready', or retried by the check). */
  private resubscribing = false;
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
    if (this.closing) return;
    if (this.dropped) {
      // Resubscribing failed on a connection that stayed up (an error answer, a timeout): no new
      // connection, so no 'ready', will come to try again, and messages would be missed for good.
      if (this.subscriber.status === 'ready') await this.resubscribe();
      return;
    }
    const answered = await settlesWithin(this.subscriber.ping(), timeoutMs).catch(() => false);
    if (answered || this.closing || this.dropped) return;
    this.lost(`redis subscriber connection did not answer a ping within ${timeoutMs} ms; reconnecting`);
    // A fresh connection: its 'ready' resubscribes, and the reconnect handlers run.
    this.subscriber.disconnect(true);
  }

  static async connect(
    url: string,
    prefix: string,
    log: Logger,
    options: RedisLinkOptions = {},
  ): Promise<RedisLink> {
    checkRedisUrl(url);
    const target = describeRedisUrl(url);
    const connectTimeoutMs = options.connectTimeoutMs ?? REDIS_CONNECT_TIMEOUT_MS;
    const base: RedisOptions = {
      ...OPTIONS,
      connectTimeout: connectTimeoutMs,
      commandTimeout: options.commandTimeoutMs ?? REDIS_COMMAND_TIMEOUT_MS,
    };
    const id = randomUUID();
    // Named, so an operator can tell the connections apart in CLIENT LIST.
    const commands = new Redis(url, {
      ...base,
      enableAutoPipelining: true,
      connectionName: `svc-${id}`,
      // A connection that stops answering (a partition, a failover behind the same address) is
      // closed and made again once its commands went unanswered this long, instead of waiting for
      // TCP to give up (many minutes).
      socketTimeout: base.commandTimeout,
      // A command whose caller was already told it failed (timed out: the call answered 503) is
      // not sent again: ioredis would resend the unanswered commands on the new connection, and
      // count a rate-limit hit or a session reservation a second time. (One already on its way
      // may still arrive when the network heals, as any write may.)
      autoResendUnfulfilledCommands: false,
    });
    // Resubscription is done by hand, so that it is known when it completed (see resubscribe).
    const subscriber = new Redis(url, {
      ...base,
      autoResubscribe: false,
      connectionName: `svc-sub-${id}`,
    });
    // Listening before connecting: ioredis prints every error event nobody listens to, with its
    // stack (a refused SELECT, an unknown host), before the start could say what is wrong.
    let lastError: Error | null = null;
    let refused: Error | null = null;
    let connecting = true;
    let refuse: (err: Error) => void = () => {};
    const refusal = new Promise<never>((_, reject) => {
      refuse = reject;
    });
    for (const c of [commands, subscriber]) {
      c.on('error', (err: Error) => {
        if (!connecting) return;
        lastError = err;
        // Redis answered the set-up with an error (SELECT of a database it does not have, AUTH):
        // ioredis goes on regardless (on database 0 after a failed SELECT), the start must not.
        if (err?.name === 'ReplyError' || /^Ready check failed/.test(err?.message ?? '')) {
          refused ??= err;
          refuse(err);
        }
      });
    }
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Error(`no answer within ${connectTimeoutMs} ms`);
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(deadline), connectTimeoutMs);
      });
      await Promise.race([Promise.all([commands.connect(), subscriber.connect()]), late, refusal]);
      // A failed SELECT is reported before the ready check that follows it completes.
      if (refused) throw refused;
    } catch (err) {
      connecting = false;
      commands.disconnect();
      subscriber.disconnect();
      // Both are set by the listeners above, which TypeScript does not see.
      const last = lastError as Error | null;
      const denied = refused as Error | null;
      const cause: Error = denied ?? last ?? (err as Error);
      // Silence (the connect deadline, or a set-up command that timed out) says more than the
      // "Connection is closed." ioredis reports when it gives a connection up.
      const why = denied
        ? denied.message
        : err === deadline
          ? deadline.message
          : /timed out|socket timeout/i.test(last?.message ?? '')
            ? `no answer within ${base.commandTimeout} ms`
            : cause.message;
      throw new Error(`cannot connect to Redis at SVC_REDIS_URL (${target}): ${why}`, { cause });
    } finally {
      clearTimeout(timer);
    }
    connecting = false;
    return new RedisLink(id, commands, subscriber, prefix, log, options.check ?? SUBSCRIBER_CHECK);
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
    if (!this.dropped || this.closing || this.resubscribing) return;
    this.resubscribing = true;
    try {
      if (this.handlers.size > 0) await this.subscriber.subscribe(...this.handlers.keys());
      this.dropped = false;
      this.log.info({}, 'redis subscriber reconnected');
      for (const h of this.reconnectHandlers) h();
    } catch (err) {
      this.log.error({ err }, 'redis resubscribe failed; retrying at the next check');
    } finally {
      this.resubscribing = false;
    }
  }

  async ping(): Promise<void> {
    await this.commands.ping();
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.checker);
    await Promise.allSettled([this.subscriber.quit(), this.commands.quit()]);
    // QUIT unanswered (Redis away: it timed out): the connections are cut instead, without waiting
    // for a Redis that does not answer to close its side.
    await Promise.all(
      [this.subscriber, this.commands].map(async (c) => {
        if (c.status === 'end') return;
        let timer: NodeJS.Timeout | undefined;
        const ended = new Promise<void>((r) => {
          c.once('end', () => r());
          timer = setTimeout(r, 1000);
        });
        c.disconnect();
        c.stream?.destroy();
        await ended;
        clearTimeout(timer);
      }),
    );
  }
}
