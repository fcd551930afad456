import {
  CONSTRAINT_FIELDS,
  type CompiledPolicy,
  compilePolicy,
  type PolicyDefinition,
} from '@svc/policy-engine';
import { ApiError } from './errors.js';
import { apiError, type Http } from './http.js';

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
  /** The stream connection it was fetched under (live updates reach it), or -1. */
  epoch: number;
}

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

/** A 404 of the API itself (its error envelope, code not_found), not of a proxy or a wrong base URL. */
const policyNotFound = (body: unknown): boolean =>
  (body as { error?: { code?: unknown } } | null)?.error?.code === 'not_found';

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
 */
export class PolicyCache {
  private readonly entries = new Map<string, Entry>();
  private readonly inflight = new Map<string, Promise<CachedPolicy | null>>();
  /** Bumped per tool by every policy event, so a fetch that raced an event is not cached. */
  private readonly generations = new Map<string, number>();
  /** Current stream connection, and whether it is up. */
  epoch = 0;
  live = false;
  /** When the current stream last delivered a byte. */
  private heardAt = 0;

  constructor(
    private readonly http: Http,
    private readonly maxStalenessMs: number,
    /** A monotonic clock in ms (the client's latency clock, so the hot path reads one clock once). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The cached policy if it is fresh at `now`, else undefined. The hot path: no allocation. */
  fresh(toolName: string, now = this.now()): CachedPolicy | undefined {
    const e = this.entries.get(toolName);
    if (e === undefined) return undefined;
    const current =
      this.live && e.epoch === this.epoch && this.heardAt > e.verifiedAt ? this.heardAt : e.verifiedAt;
    return now - current <= this.maxStalenessMs ? e.policy : undefined;
  }

  /** The stream delivered bytes just now. */
  heard(): void {
    this.heardAt = this.now();
  }

  /** Fetches the tool's policy (one request per tool at a time); null when it could not be fetched. */
  load(toolName: string): Promise<CachedPolicy | null> {
    let p = this.inflight.get(toolName);
    if (p === undefined) {
      p = this.fetch(toolName).finally(() => this.inflight.delete(toolName));
      this.inflight.set(toolName, p);
    }
    return p;
  }

  private async fetch(toolName: string): Promise<CachedPolicy | null> {
    // "." and ".." cannot be a path segment: URLs resolve them away, to another route. The server
    // decides such a tool's calls by name (validate carries it in the body).
    if (toolName === '.' || toolName === '..') return { kind: 'server', version: 0 };
    const generation = this.generations.get(toolName) ?? 0;
    const epoch = this.live ? this.epoch : -1;
    const verifiedAt = this.now();
    const res = await this.http.request('GET', `/v1/policies/${encodeURIComponent(toolName)}`);
    let policy: CachedPolicy;
    if (res.status === 200) policy = toCached(policyBody(res.body));
    else if (res.status === 404 && policyNotFound(res.body)) policy = { kind: 'none' };
    else throw apiError(res);
    // An event for this tool arrived meanwhile: this answer may predate it, so it is used once, not kept.
    if ((this.generations.get(toolName) ?? 0) === generation) {
      this.entries.set(toolName, { policy, verifiedAt, epoch: this.live ? epoch : -1 });
    }
    return policy;
  }

  /** A policy event: forget the tool's entry; known tools are fetched again in the background. */
  changed(toolName: string): boolean {
    this.generations.set(toolName, (this.generations.get(toolName) ?? 0) + 1);
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
