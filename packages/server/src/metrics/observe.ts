import type { EventBus, ServiceEvent } from '../events/bus.js';
import type { RateLimiter } from '../plugins/rate-limit.js';
import type { Metrics } from './model.js';

const APPROVAL_STATES: Record<string, string> = { approve: 'approved', deny: 'denied' };

/** Counts what happened from the events this process publishes (not those relayed from other instances). */
function count(metrics: Pick<Metrics, 'decision' | 'approval'>, event: ServiceEvent): void {
  const d = event.data;
  if (event.type === 'decision.created') metrics.decision(String(d.decision), String(d.mode));
  else if (event.type === 'approval.created') metrics.approval('requested');
  else if (event.type === 'approval.resolved') {
    metrics.approval(APPROVAL_STATES[String(d.action)] ?? String(d.action));
  } else if (event.type === 'approval.expired') metrics.approval('expired');
}

/** The bus, counting decisions and approval transitions as they are published. */
export function countEvents(bus: EventBus, metrics: Pick<Metrics, 'decision' | 'approval'>): EventBus {
  return {
    publish(event) {
      count(metrics, event);
      bus.publish(event);
    },
    subscribe: (handler) => bus.subscribe(handler),
    close: () => bus.close(),
  };
}

/** The limiter, counting refusals by the limit's name (the bucket's prefix: `validate:<key>` → validate). */
export function countRateLimits(limiter: RateLimiter, metrics: Pick<Metrics, 'rateLimited'>): RateLimiter {
  return {
    async hit(bucket, limit, windowMs, nowMs) {
      const result = await limiter.hit(bucket, limit, windowMs, nowMs);
      if (!result.allowed) metrics.rateLimited(bucket.split(':', 1)[0]!);
      return result;
    },
    close: () => limiter.close(),
  };
}
