import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import type { Clock } from '../lib/clock.js';
import { AppError } from '../lib/errors.js';
import type { KeyPrincipal } from '../modules/api-keys/authenticator.js';

export interface RateLimitResult {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Unix time (seconds) at which the current window ends. */
  resetAt: number;
}

/** Fixed-window counters; in-memory by default, shared through Redis when scaled out. */
export interface RateLimiter {
  hit(bucket: string, limit: number, windowMs: number, nowMs: number): Promise<RateLimitResult>;
  close(): Promise<void>;
}

export class MemoryRateLimiter implements RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor() {
    // Forget windows that ended: memory stays proportional to recently active keys.
    this.sweeper = setInterval(() => {
      const now = Date.now();
      for (const [k, w] of this.windows) if (now - w.start > 10 * 60_000) this.windows.delete(k);
    }, 60_000);
    this.sweeper.unref();
  }

  async hit(bucket: string, limit: number, windowMs: number, nowMs: number): Promise<RateLimitResult> {
    const start = nowMs - (nowMs % windowMs);
    let w = this.windows.get(bucket);
    if (!w || w.start !== start) {
      w = { start, count: 0 };
      this.windows.set(bucket, w);
    }
    const allowed = w.count < limit;
    if (allowed) w.count++;
    return {
      allowed,
      limit,
      remaining: Math.max(0, limit - w.count),
      resetAt: Math.ceil((start + windowMs) / 1000),
    };
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }
}

/**
 * Counts one hit unless the window is full (a refused hit does not count, as in memory), and sets the
 * expiry on the first hit, in one atomic step shared by every instance.
 */
const HIT_SCRIPT = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return {0, n} end
n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {1, n}`;

type HitCommand = (key: string, limit: number, ttlMs: number) => Promise<[number, number]>;

/** Fixed windows in Redis, keyed by window start: same answers and headers as MemoryRateLimiter. */
export class RedisRateLimiter implements RateLimiter {
  private readonly hitScript: HitCommand;

  constructor(
    redis: Redis,
    private readonly prefix: string,
  ) {
    redis.defineCommand('svcRateHit', { numberOfKeys: 1, lua: HIT_SCRIPT });
    this.hitScript = (redis as unknown as { svcRateHit: HitCommand }).svcRateHit.bind(redis);
  }

  async hit(bucket: string, limit: number, windowMs: number, nowMs: number): Promise<RateLimitResult> {
    const start = nowMs - (nowMs % windowMs);
    let reply: [number, number];
    try {
      // The key outlives its window by a second so a slightly late clock still finds it.
      reply = await this.hitScript(`${this.prefix}rl:${bucket}:${start}`, limit, windowMs + 1000);
    } catch {
      // Fail closed: without the shared counter the limit cannot be enforced.
      throw new AppError('service_unavailable', 'The rate limiter is not answering; retry shortly');
    }
    const [allowed, count] = reply;
    return {
      allowed: allowed === 1,
      limit,
      remaining: Math.max(0, limit - count),
      resetAt: Math.ceil((start + windowMs) / 1000),
    };
  }

  /** The connection belongs to the caller (shared with the other Redis users of the process). */
  async close(): Promise<void> {}
}

export const VALIDATION_LIMITS: Record<string, number> = {
  free: 60,
  team: 600,
  business: 600,
  enterprise: 600,
};

/** Per-minute validation limit of a key's organization; enterprise uses the organization's custom rate. */
export function validationLimit(tier: string, custom: number | null): number {
  if (tier === 'enterprise' && custom !== null) return custom;
  return VALIDATION_LIMITS[tier] ?? VALIDATION_LIMITS.free!;
}

/** A per-key budget: its bucket name, its limit for a key, and its window. */
export interface RateLimitRule {
  bucket: string;
  limit(key: KeyPrincipal): number;
  /** The limit per user (token or dashboard session) on routes people call too; unset: users are not counted. */
  userLimit?: number;
  windowMs: number;
}

/**
 * The budgets routes declare (`config: { rateLimit: 'validate' }`). `validate` is one budget of checked
 * calls per key, whichever path makes them (POST /v1/tools/validate, MCP tools/call).
 */
export const RATE_LIMITS = {
  validate: {
    bucket: 'validate',
    limit: (key: KeyPrincipal) => validationLimit(key.tier, key.rateLimitPerMinute),
    windowMs: 60_000,
  },
  /** SPEC section 8: decision logging, 120 requests per 60 seconds per API key. */
  decisions: { bucket: 'decisions', limit: () => 120, windowMs: 60_000 },
  /** The policy assistant (/v1/charter/*): 60 requests per 60 seconds per API key, and per user. */
  charter: { bucket: 'charter', limit: () => 60, userLimit: 60, windowMs: 60_000 },
} satisfies Record<string, RateLimitRule>;

export type RateLimitName = keyof typeof RATE_LIMITS;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The per-key budget this route counts against; applied by one hook before the body is read. */
    rateLimit?: RateLimitName;
  }
}

/** Counts one call of `key` against a declared budget: sets the X-RateLimit-* headers, throws 429 when over. */
export function applyRateLimit(
  limiter: RateLimiter,
  name: RateLimitName,
  key: KeyPrincipal,
  reply: FastifyReply,
  nowMs: number,
): Promise<void> {
  const rule: RateLimitRule = RATE_LIMITS[name];
  return enforceRateLimit(
    limiter,
    reply,
    `${rule.bucket}:${key.keyId}`,
    rule.limit(key),
    rule.windowMs,
    nowMs,
  );
}

/**
 * Applies the budget a route declares. Counted once the caller is known (onRequest) and before the
 * body is read, so every answer of such a route carries the X-RateLimit headers and counts: a body
 * that is not JSON, too large, of another media type or invalid (400, 413, 415) included. A user is
 * counted only by a budget with a `userLimit`; other principals are not counted (auth already
 * refused them).
 */
export function registerRateLimits(app: FastifyInstance, deps: { limiter: RateLimiter; clock: Clock }): void {
  app.addHook('preParsing', async (req, reply) => {
    const name = req.routeOptions.config.rateLimit;
    if (!name) return;
    const principal = req.principal;
    if (principal?.kind === 'apiKey') {
      await applyRateLimit(deps.limiter, name, principal, reply, deps.clock.now().getTime());
      return;
    }
    const rule: RateLimitRule = RATE_LIMITS[name];
    if (principal?.kind !== 'user' || rule.userLimit === undefined) return;
    await enforceRateLimit(
      deps.limiter,
      reply,
      `${rule.bucket}:user:${principal.userId}`,
      rule.userLimit,
      rule.windowMs,
      deps.clock.now().getTime(),
    );
  });
}

/** Applies one hit: sets the X-RateLimit-* headers and throws 429 when over. */
export async function enforceRateLimit(
  limiter: RateLimiter,
  reply: FastifyReply,
  bucket: string,
  limit: number,
  windowMs: number,
  nowMs: number,
): Promise<void> {
  const r = await limiter.hit(bucket, limit, windowMs, nowMs);
  const headers = {
    'x-ratelimit-limit': String(r.limit),
    'x-ratelimit-remaining': String(r.remaining),
    'x-ratelimit-reset': String(r.resetAt),
  };
  reply.headers(headers);
  if (!r.allowed) {
    const retry = Math.max(1, r.resetAt - Math.floor(nowMs / 1000));
    throw new AppError(
      'rate_limit_exceeded',
      `Rate limit of ${r.limit} requests per window exceeded; retry in ${retry} s`,
      {
        ...headers,
        'retry-after': String(retry),
      },
    );
  }
}
