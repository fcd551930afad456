import {
  CONSTRAINT_FIELDS,
  type CompiledPolicy,
  compilePolicy,
  type PolicyDefinition,
} from '@svc/policy-engine';
import { ApiError } from './errors.js';
import { apiError, type Http, type HttpResponse, notTheService } from './http.js';

/**
 * What the client knows of one tool's policy. `server` marks a policy only the server can decide
 * (LLM mode, session limits, a definition this engine version refuses or holds fields it does not
 * know): calls go to the server.
 */
export type CachedPolicy =
  | { kind: 'none' }
  | { kind: 'inactive'; version: number }
  | { kind: 'local'; version: number; compiled: CompiledPolicy }
  | { kind: 'server'; version: number };

interface Entry {
  policy: CachedPolicy;
  /**
   * When the policy was last known current: fetched, or confirmed by the stream it was fetched under
   * up to the last byte that stream delivered before it dropped.
   */
  verifiedAt: number;
  /**
   * Past this (fetch time plus `maxPolicyAgeMs`) the policy is fetched again, whatever the stream
   * vouched for: an event the service failed to deliver would otherwise leave it in use for ever.
   */
  expiresAt: number;
  /** The stream connection it was fetched under (live updates reach it), or -1. */
  epoch: number;
  /** Read since eviction last passed it (the second chance of the CLOCK eviction). */
  used: boolean;
}

/** One fetch of a tool's policy; `stale` once a policy event for the tool arrived while it ran. */
interface Fetch {
  promise: Promise<CachedPolicy | null>;
  stale: boolean;
}

/** Tools whose policy is cached at most, by default (ClientOptions.maxCachedPolicies). */
export const MAX_CACHED_POLICIES = 10_000;

/**
 * How long a fetched policy is used at most, by default (ClientOptions.maxPolicyAgeMs), when
 * `maxStalenessMs` is not longer.
 */
export const MAX_POLICY_AGE_MS = 300_000;

/**
 * The response header by which the service's policy route tells "this tool has no policy" (404
 * `not_found`) apart from every other 404: an unknown route of the service (a base URL with a path
 * of its own, `https://host/v1`), a proxy's page. Only that answer allows the tool's calls unchecked.
 */
export const NO_POLICY_HEADER = 'x-policy';
export const NO_POLICY_VALUE = 'none';

interface PolicyBody {
  mode: PolicyDefinition['mode'];
  isActive: boolean;
  version: number;
  constraints?: PolicyDefinition['constraints'];
  sessionConstraints?: PolicyDefinition['sessionConstraints'];
  llmConfig?: PolicyDefinition['llmConfig'];
}

/**
 * The policy of a 200 answer. What does not have the API's policy shape (a proxy's page, `{}`) is
 * an error, never a decision: read as a policy, a missing `isActive` would make it "inactive" and
 * allow the call.
 */
function policyBody(body: unknown): PolicyBody {
  const b = body as Partial<PolicyBody> | null;
  if (
    typeof b !== 'object' ||
    b === null ||
    typeof b.isActive !== 'boolean' ||
    typeof b.mode !== 'string' ||
    !Number.isInteger(b.version)
  ) {
    throw new ApiError(200, 'invalid_answer', 'the service answered something that is not a policy');
  }
  return b as PolicyBody;
}

/**
 * The policy route's own "no policy" 404: the API's envelope (code not_found) and the route's marker
 * header. Any other 404 comes from something else than the policy route (see NO_POLICY_HEADER).
 */
const policyNotFound = (res: HttpResponse): boolean =>
  res.headers.get(NO_POLICY_HEADER) === NO_POLICY_VALUE &&
  (res.body as { error?: { code?: unknown } } | null)?.error?.code === 'not_found';

const KNOWN_CONSTRAINT_FIELDS: ReadonlySet<string> = new Set(CONSTRAINT_FIELDS);
const KNOWN_SESSION_FIELDS: ReadonlySet<string> = new Set(['maxCalls', 'cumulativeLimits']);

/**
 * True when `value` (an object of the policy's definition) sets a field outside `known`: a field a
 * newer service enforces and this engine would ignore. null is "not set", as in the API's bodies.
 */
const setsUnknownField = (value: unknown, known: ReadonlySet<string>): boolean =>
  typeof value === 'object' &&
  value !== null &&
  Object.entries(value).some(([field, v]) => v !== null && v !== undefined && !known.has(field));

function toCached(body: PolicyBody): CachedPolicy {
  if (!body.isActive) return { kind: 'inactive', version: body.version };
  const sc = body.sessionConstraints;
  const sessionLimits =
    !!sc &&
    (sc.maxCalls !== undefined ||
      (sc.cumulativeLimits?.length ?? 0) > 0 ||
      setsUnknownField(sc, KNOWN_SESSION_FIELDS));
  // A constraint field this engine does not know would be dropped by compilePolicy, and the call
  // allowed here that the service denies: such a policy is decided by the service.
  const unknownConstraint =
    Array.isArray(body.constraints) &&
    body.constraints.some((c) => setsUnknownField(c, KNOWN_CONSTRAINT_FIELDS));
  if (body.mode !== 'deterministic' || sessionLimits || unknownConstraint) {
    return { kind: 'server', version: body.version };
  }
  try {
    const compiled = compilePolicy({
      mode: body.mode,
      constraints: body.constraints ?? [],
      sessionConstraints: body.sessionConstraints ?? null,
      llmConfig: body.llmConfig ?? null,
    });
    return { kind: 'local', version: body.version, compiled };
  } catch {
    // A definition this engine cannot compile (a newer server's constraint): let the server decide.
    return { kind: 'server', version: body.version };
  }
}

/**
 * Cached policies, each usable only while fresh: at most `maxStalenessMs` after it was last known
 * current. The event stream it was fetched under keeps it current up to the last byte that stream
 * delivered (an event, or the server's heartbeat): a change would have come before that byte. A
 * stream that goes silent without closing (a half-open connection) therefore stops vouching for it
 * after `maxStalenessMs`, long before the stream is declared dead.
 *
 * The stream vouches only for the events the service delivered to it: one it failed to deliver (a
 * publish lost between its instances) leaves a live, heartbeating stream vouching for a changed
 * policy. So whatever the stream says, a policy is used at most `maxPolicyAgeMs` after it was
 * fetched, then fetched again.
 *
 * At most `maxEntries` tools are cached: past that, one that was not read for longest (roughly: a
 * CLOCK, which costs the hot path one field write) is dropped, and fetched again when next called.
 * Nothing is kept per tool beyond its entry and a fetch under way.
 */
export class PolicyCache {
  /** In the order they were stored (or given a second chance), the oldest first. */
  private readonly entries = new Map<string, Entry>();
  /** The fetch under way per tool; a policy event marks it stale, so its answer is not cached. */
  private readonly inflight = new Map<string, Fetch>();
  /** Current stream connection, and whether it is up. */
  epoch = 0;
  live = false;
  /** When the current stream last delivered a byte. */
  private heardAt = 0;
  private readonly maxEntries: number;

  constructor(
    private readonly http: Http,
    private readonly maxStalenessMs: number,
    /** A monotonic clock in ms (the client's latency clock, so the hot path reads one clock once). */
    private readonly now: () => number = () => performance.now(),
    maxEntries = MAX_CACHED_POLICIES,
    /** At least `maxStalenessMs` (ClientOptions.maxPolicyAgeMs). */
    private readonly maxPolicyAgeMs = Math.max(MAX_POLICY_AGE_MS, maxStalenessMs),
  ) {
    this.maxEntries = Math.max(1, Math.floor(maxEntries));
  }

  /** How many tools are cached. */
  get size(): number {
    return this.entries.size;
  }

  /** The cached policy if it is fresh at `now`, else undefined. The hot path: no allocation. */
  fresh(toolName: string, now = this.now()): CachedPolicy | undefined {
    const e = this.entries.get(toolName);
    if (e === undefined) return undefined;
    e.used = true;
    const current =
      this.live && e.epoch === this.epoch && this.heardAt > e.verifiedAt ? this.heardAt : e.verifiedAt;
    return now - current <= this.maxStalenessMs && now <= e.expiresAt ? e.policy : undefined;
  }

  /** The stream delivered bytes just now. */
  heard(): void {
    this.heardAt = this.now();
  }

  /**
   * Fetches the tool's policy (one request per tool at a time); null when it could not be fetched.
   * A fetch a policy event made stale is not joined: its answer may predate the change.
   */
  load(toolName: string): Promise<CachedPolicy | null> {
    const running = this.inflight.get(toolName);
    if (running !== undefined && !running.stale) return running.promise;
    const f: Fetch = { promise: undefined as unknown as Promise<CachedPolicy | null>, stale: false };
    this.inflight.set(toolName, f);
    f.promise = this.fetch(toolName, f).finally(() => {
      if (this.inflight.get(toolName) === f) this.inflight.delete(toolName);
    });
    return f.promise;
  }

  private async fetch(toolName: string, f: Fetch): Promise<CachedPolicy | null> {
    // "." and ".." cannot be a path segment: URLs resolve them away, to another route. The server
    // decides such a tool's calls by name (validate carries it in the body).
    if (toolName === '.' || toolName === '..') return { kind: 'server', version: 0 };
    const epoch = this.live ? this.epoch : -1;
    const verifiedAt = this.now();
    const path = `/v1/policies/${encodeURIComponent(toolName)}`;
    const res = await this.http.request('GET', path);
    let policy: CachedPolicy;
    if (res.status === 200) policy = toCached(policyBody(res.body));
    else if (res.status === 404 && policyNotFound(res)) policy = { kind: 'none' };
    // Not the policy route's answer (a wrong base URL, a proxy): never read as "no policy".
    else if (res.status === 404) throw notTheService('GET', this.http.url(path), res);
    else throw apiError(res);
    // An event for this tool arrived meanwhile: this answer may predate it, so it is used once, not kept.
    if (!f.stale) {
      this.store(toolName, {
        policy,
        verifiedAt,
        expiresAt: verifiedAt + this.maxPolicyAgeMs,
        epoch: this.live ? epoch : -1,
        used: false,
      });
    }
    return policy;
  }

  /** Caches `entry` as the newest, dropping the least recently read tool past `maxEntries`. */
  private store(toolName: string, entry: Entry): void {
    this.entries.delete(toolName);
    this.entries.set(toolName, entry);
    if (this.entries.size <= this.maxEntries) return;
    // CLOCK: from the oldest, a tool read since it was last passed goes to the back, unmarked (so
    // does the one just stored); the first other one not read is dropped. Each entry is passed at
    // most twice, so this ends.
    for (const [tool, e] of this.entries) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(tool);
      if (e.used || tool === toolName) {
        e.used = false;
        this.entries.set(tool, e);
      }
    }
  }

  /** A policy event: forget the tool's entry; known tools are fetched again in the background. */
  changed(toolName: string): boolean {
    const f = this.inflight.get(toolName);
    if (f !== undefined) f.stale = true;
    return this.entries.delete(toolName);
  }

  /** The stream connected: events missed while it was down are not replayed, so start over. */
  connected(): string[] {
    this.epoch++;
    this.live = true;
    this.heardAt = this.now();
    const known = [...this.entries.keys()];
    this.entries.clear();
    return known;
  }

  /**
   * The stream dropped: entries it kept current count as verified until its last byte, not until
   * now (it may have been silent, a change undelivered, for up to its 45 s watchdog).
   */
  disconnected(): void {
    if (!this.live) return;
    this.live = false;
    const last = this.heardAt;
    for (const e of this.entries.values()) {
      if (e.epoch === this.epoch && last > e.verifiedAt) e.verifiedAt = last;
    }
  }
}
