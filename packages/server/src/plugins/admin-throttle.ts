import { AppError } from '../lib/errors.js';

export interface AdminThrottleOptions {
  /** Refused admin authentications an address may make per window (default 10). */
  limit: number;
  /** The window, opened by an address's first refusal (default 60 s). */
  windowMs: number;
  /** Addresses remembered at most; past it, the oldest window is forgotten first (default 10,000). */
  maxEntries: number;
}

export const ADMIN_THROTTLE_DEFAULTS: AdminThrottleOptions = {
  limit: 10,
  windowMs: 60_000,
  maxEntries: 10_000,
};

interface Window {
  start: number;
  count: number;
}

/**
 * Bounds online guessing of the operator admin token: each client address has a budget of refused
 * admin authentications per fixed window (opened by its first refusal). Once the budget is spent, every
 * admin request from that address is refused with 429 until the window ends, before the token is even
 * looked at, so a right guess in that time does not reveal itself. A successful authentication does not
 * reset the count. Counted in this process only (with Redis too: N instances allow N × the budget).
 *
 * Memory is bounded: the map keeps insertion order, and a window is (re)inserted when it opens, so the
 * oldest window is first; ended windows are dropped from the front as new ones open, and past
 * `maxEntries` the oldest is evicted even if it has not ended.
 */
export class AdminAuthThrottle {
  private readonly windows = new Map<string, Window>();
  readonly options: AdminThrottleOptions;

  constructor(options: Partial<AdminThrottleOptions> = {}) {
    this.options = { ...ADMIN_THROTTLE_DEFAULTS, ...options };
  }

  /** Addresses currently remembered. */
  get size(): number {
    return this.windows.size;
  }

  /** Milliseconds until `address` may try again, 0 when it is not blocked. */
  blockedFor(address: string, nowMs: number): number {
    const w = this.windows.get(address);
    if (!w) return 0;
    const end = w.start + this.options.windowMs;
    if (nowMs >= end) return 0;
    return w.count >= this.options.limit ? end - nowMs : 0;
  }

  /** Counts one refused admin authentication of `address`. */
  refused(address: string, nowMs: number): void {
    const w = this.windows.get(address);
    if (w && nowMs < w.start + this.options.windowMs) {
      w.count++;
      return;
    }
    // A new window: to the end of the map, the newest.
    if (w) this.windows.delete(address);
    this.forgetEnded(nowMs);
    while (this.windows.size >= this.options.maxEntries) {
      const oldest = this.windows.keys().next().value as string;
      this.windows.delete(oldest);
    }
    this.windows.set(address, { start: nowMs, count: 1 });
  }

  /** Throws 429 `rate_limit_exceeded` with Retry-After when `address` has spent its budget. */
  check(address: string, nowMs: number): void {
    const waitMs = this.blockedFor(address, nowMs);
    if (waitMs === 0) return;
    const retry = Math.max(1, Math.ceil(waitMs / 1000));
    throw new AppError(
      'rate_limit_exceeded',
      `Too many refused admin authentications from this address; retry in ${retry} s`,
      { 'retry-after': String(retry) },
    );
  }

  /** Drops ended windows from the front (the oldest); stops at the first that has not ended. */
  private forgetEnded(nowMs: number): void {
    for (const [address, w] of this.windows) {
      if (nowMs < w.start + this.options.windowMs) return;
      this.windows.delete(address);
    }
  }
}
