import type { FastifyBaseLogger } from 'fastify';
import type { Config } from './config.js';
import type { Enforcement } from './enforcement/pipeline.js';
import type { EventBus } from './events/bus.js';
import type { EventHub } from './events/hub.js';
import type { Checkpointer } from './ledger/checkpoints.js';
import type { DecisionWriter } from './ledger/writer.js';
import type { Clock } from './lib/clock.js';
import type { ScopeResolver } from './lib/scope.js';
import type { Metrics } from './metrics/model.js';
import type { ApiKeyAuthenticator } from './modules/api-keys/authenticator.js';
import type { ApprovalService } from './modules/approvals/service.js';
import type { PolicyJudge } from './modules/llm-judge/judge.js';
import type { PolicyCache } from './modules/policies/cache.js';
import type { SessionService } from './modules/sessions/service.js';
import type { RateLimiter } from './plugins/rate-limit.js';
import type { RedisLink } from './scale/redis.js';
import type { SigningKeySet } from './signing/keyset.js';
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
  /** Open SSE and WebSocket connections, fed from `events`. */
  streams: EventHub;
  policies: PolicyCache;
  writer: DecisionWriter;
  /** The one path of every enforced call (validate, MCP tools/call, client-reported decisions). */
  enforcement: Enforcement;
  /** Judges llm-mode policies; also tells the dry run which provider would judge. */
  judge: PolicyJudge;
  approvals: ApprovalService;
  rateLimiter: RateLimiter;
  /** The Redis connections when SVC_REDIS_URL is set (scale-out), else null. */
  redis: RedisLink | null;
  /** The service's Ed25519 signing key set (checkpoints, capsules), published at /.well-known/svc-keys.json. */
  signing: SigningKeySet;
  /** Signed checkpoints of every organization's receipt chain. */
  checkpoints: Checkpointer;
  /** Prometheus metrics; call sites use its narrow methods. */
  metrics: Metrics;
  /** Dashboard login links and cookie sessions. */
  sessions: SessionService;
}
