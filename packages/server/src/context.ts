import type { FastifyBaseLogger } from 'fastify';
import type { Config } from './config.js';
import type { EventBus } from './events/bus.js';
import type { Clock } from './lib/clock.js';
import type { ScopeResolver } from './lib/scope.js';
import type { ApiKeyAuthenticator } from './modules/api-keys/authenticator.js';
import type { DecisionWriter } from './modules/decisions/writer.js';
import type { PolicyCache } from './modules/policies/cache.js';
import type { ValidationService } from './modules/validation/service.js';
import type { RateLimiter } from './plugins/rate-limit.js';
import type { Store } from './storage/db.js';

/** Shared infrastructure handed to every module plugin; each module builds its own services from it. */
export interface AppContext {
  config: Config;
  store: Store;
  clock: Clock;
  log: FastifyBaseLogger;
  keys: ApiKeyAuthenticator;
  scope: ScopeResolver;
  events: EventBus;
  policies: PolicyCache;
  writer: DecisionWriter;
  validation: ValidationService;
  rateLimiter: RateLimiter;
}
