import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import { RedisEventBus } from '../events/redis-bus.js';
import { RedisRateLimiter } from '../plugins/rate-limit.js';
import type { Store } from '../storage/db.js';
import { type CacheTargets, InvalidationBroadcaster } from './invalidation.js';
import { RedisLink } from './redis.js';
import { evictionWarning, RedisSessionCounters } from './sessions.js';

/** What changes when SVC_REDIS_URL is set: every instance on the same Redis acts as one service. */
export interface ScaleOut {
  link: RedisLink;
  events: RedisEventBus;
  rateLimiter: RedisRateLimiter;
  sessions: RedisSessionCounters;
  /** Broadcasts cache invalidations; each HTTP response waits until they are acknowledged. */
  wire(app: FastifyInstance, targets: CacheTargets): Promise<void>;
  close(): Promise<void>;
}

export async function connectScaleOut(
  config: Pick<Config, 'redisUrl' | 'redisPrefix'>,
  store: Store,
  log: FastifyBaseLogger,
): Promise<ScaleOut> {
  const link = await RedisLink.connect(config.redisUrl!, config.redisPrefix, log);
  try {
    const warning = evictionWarning(await evictionPolicy(link));
    if (warning) log.warn(warning);
    const events = await RedisEventBus.create(link, log);
    return {
      link,
      events,
      rateLimiter: new RedisRateLimiter(link.commands, config.redisPrefix),
      sessions: new RedisSessionCounters(link.commands, config.redisPrefix, store, log),
      async wire(app, targets) {
        const broadcaster = await InvalidationBroadcaster.create(link, targets, log);
        // A response that changed a policy or a key leaves only after every instance dropped its
        // copy, so whatever instance the client reaches next answers from the new state. It waits
        // for the broadcasts pending when it is sent (its own among them), each bounded by the 2 s
        // acknowledgement deadline, not for those started later. Written as a callback hook: no
        // promise per response while nothing is pending.
        app.addHook('onSend', (_req, _reply, payload, done) => {
          if (!broadcaster.busy) return done(null, payload);
          broadcaster.settled().then(() => done(null, payload));
        });
      },
      close: () => link.close(),
    };
  } catch (err) {
    await link.close();
    throw err;
  }
}

/** Redis's maxmemory-policy, or null where CONFIG is not allowed (many managed services). */
async function evictionPolicy(link: RedisLink): Promise<string | null> {
  try {
    const reply = (await link.commands.config('GET', 'maxmemory-policy')) as unknown;
    return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : null;
  } catch {
    return null;
  }
}
