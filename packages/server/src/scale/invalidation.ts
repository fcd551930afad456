import { randomUUID } from 'node:crypto';
import type { ApiKeyAuthenticator } from '../modules/api-keys/authenticator.js';
import type { PolicyCache } from '../modules/policies/cache.js';
import type { SessionService } from '../modules/sessions/service.js';
import type { Logger, RedisLink } from './redis.js';

type Invalidation =
  | { kind: 'policy'; organizationId: string; toolName: string | null }
  | { kind: 'keys'; keyIds?: string[]; organizationId?: string }
  | { kind: 'session'; key: string };

type Message = Invalidation & { id: string; from: string };

/** What every instance must drop or end when another instance changes it. */
export interface CacheTargets {
  keys: ApiKeyAuthenticator;
  policies: PolicyCache;
  /** Dashboard sessions: one signed out ends its streams on every instance (they hold no cache). */
  sessions: Pick<SessionService, 'onEnd' | 'ended'>;
}

interface Waiter {
  received: number;
  expected: number;
  done: () => void;
}

const CHANNEL = 'invalidate';
const ackChannel = (instanceId: string) => `ack:${instanceId}`;

/**
 * Cache invalidations across instances. A policy write or a key revocation invalidates this
 * instance's cache at once, then is published; every instance (this one included) drops its copy and
 * acknowledges. settled() resolves once every instance that received the message has acknowledged
 * (or after ackTimeoutMs), so an HTTP response that waits for it guarantees that the next request
 * is refused or sees the new policy whichever instance it reaches. A revoked key and a signed-out
 * dashboard session also end, on receipt, what they hold open (event streams, gateway sessions), so
 * those are closed on every instance by the time the response leaves.
 */
export class InvalidationBroadcaster {
  private readonly pending = new Set<Promise<void>>();
  private readonly waiters = new Map<string, Waiter>();

  private constructor(
    private readonly link: RedisLink,
    private readonly targets: CacheTargets,
    private readonly log: Logger,
    private readonly ackTimeoutMs: number,
  ) {}

  static async create(
    link: RedisLink,
    targets: CacheTargets,
    log: Logger,
    ackTimeoutMs = 2000,
  ): Promise<InvalidationBroadcaster> {
    const b = new InvalidationBroadcaster(link, targets, log, ackTimeoutMs);
    await link.listen(ackChannel(link.instanceId), (id) => b.acknowledged(id));
    await link.listen(CHANNEL, (raw) => b.receive(raw));
    targets.policies.onInvalidate = (organizationId, toolName) =>
      b.broadcast({ kind: 'policy', organizationId, toolName });
    targets.keys.onForget = (what) => b.broadcast({ kind: 'keys', ...what });
    targets.sessions.onEnd = (key) => b.broadcast({ kind: 'session', key });
    // Invalidations published while the subscriber is away are lost: from the moment it goes, no
    // cached key or policy is trusted (every lookup reads the store), until it is subscribed again.
    link.onDisconnect(() => {
      targets.policies.pause();
      targets.keys.pause();
    });
    link.onReconnect(() => {
      targets.policies.resume();
      targets.keys.resume();
    });
    return b;
  }

  /** True while a broadcast is not yet acknowledged. */
  get busy(): boolean {
    return this.pending.size > 0;
  }

  /**
   * Resolves when every broadcast started before this call is acknowledged (or timed out, after at
   * most ackTimeoutMs). Broadcasts started later, by other requests or tenants, are not waited for,
   * so a steady stream of changes cannot hold a response back. Never rejects.
   */
  settled(): Promise<void> {
    return Promise.all([...this.pending]).then(() => {});
  }

  broadcast(what: Invalidation): void {
    const p = this.send(what).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  private async send(what: Invalidation): Promise<void> {
    const id = randomUUID();
    const waiter: Waiter = { received: 0, expected: Number.POSITIVE_INFINITY, done: () => {} };
    const confirmed = new Promise<void>((resolve) => {
      waiter.done = resolve;
    });
    this.waiters.set(id, waiter);
    const message: Message = { ...what, id, from: this.link.instanceId };
    const work = (async () => {
      // PUBLISH answers how many subscribers got the message: that many acknowledgements are due.
      waiter.expected = await this.link.publish(CHANNEL, JSON.stringify(message));
      if (waiter.received < waiter.expected) await confirmed;
      return 'confirmed' as const;
    })();
    let timer: NodeJS.Timeout | undefined;
    // One deadline for publishing and acknowledging: a stuck Redis must not hold responses forever.
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.ackTimeoutMs);
    });
    try {
      if ((await Promise.race([work, deadline])) === 'timeout') {
        this.log.warn(
          { invalidation: what, acknowledged: waiter.received, expected: waiter.expected },
          'not every instance acknowledged a cache invalidation in time',
        );
      }
    } catch (err) {
      // The change itself is committed; failing the response would only invite a blind retry.
      this.log.error({ err, invalidation: what }, 'cache invalidation could not be broadcast');
    } finally {
      clearTimeout(timer);
      this.waiters.delete(id);
      work.catch(() => {});
    }
  }

  private acknowledged(id: string): void {
    const w = this.waiters.get(id);
    if (!w) return;
    w.received++;
    if (w.received >= w.expected) w.done();
  }

  private receive(raw: string): void {
    let m: Message;
    try {
      m = JSON.parse(raw) as Message;
    } catch {
      return;
    }
    // The publishing instance already invalidated its own cache before publishing.
    if (m.from !== this.link.instanceId) this.apply(m);
    this.link.publish(ackChannel(m.from), m.id).catch(() => {
      // The publisher times out and logs; nothing more to do here.
    });
  }

  private apply(m: Invalidation): void {
    if (m.kind === 'policy') {
      this.targets.policies.invalidate(m.organizationId, m.toolName, false);
    } else if (m.kind === 'session') {
      this.targets.sessions.ended(m.key, false);
    } else {
      if (m.keyIds) this.targets.keys.forgetKeys(m.keyIds, false);
      if (m.organizationId) this.targets.keys.forgetOrganization(m.organizationId, false);
    }
  }
}
