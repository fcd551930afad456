import type { FailedConstraint } from '@svc/policy-engine';

export type { FailedConstraint } from '@svc/policy-engine';

export type DecisionValue = 'allow' | 'deny' | 'require_approval';

/** The answer to one tool call. */
export interface ValidationResult {
  decision: DecisionValue;
  reason: string;
  failedConstraints: readonly FailedConstraint[];
  /** With `require_approval`: the approval a person must resolve. */
  approvalId?: string;
  /**
   * The id of the recorded decision, set on server decisions only: a local decision is recorded
   * later by the background log, and its result never carries the id.
   */
  decisionId?: string;
  /** `local`: decided in this process from a cached policy (or failing closed/open on an outage). */
  source: 'local' | 'server';
}

/** What validate does when the service cannot be reached and no fresh policy is cached. */
export type UnavailableBehaviour = 'deny' | 'throw' | 'allow';

export interface ApprovalWaitOptions {
  /** Default 2000 ms. */
  pollIntervalMs?: number;
  /** Default 300000 ms (5 minutes). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /**
   * A string an HTTP header can carry (no line break or U+0000 inside it, no character above
   * U+00FF), else createClient throws SvcError (without showing the key).
   */
  apiKey: string;
  /**
   * e.g. `https://svc.example.com` (no `/v1`). A 404 that no route of the service answers (from a
   * wrong path here, or a proxy) throws ApiError naming the URL; it never counts as "no policy".
   * Anything else than an absolute http: or https: URL without credentials, query or fragment makes
   * createClient throw SvcError.
   */
  baseUrl: string;
  /**
   * Decide locally from cached deterministic policies (default true). `true` or `false`: anything
   * else (the string 'false' included) makes createClient throw SvcError, as for `live` and
   * `log.snapshot`.
   */
  localValidation?: boolean;
  /** Keep an event stream open so policy changes reach the cache at once (default true). */
  live?: boolean;
  /**
   * The event stream is closed once the client has not been used (validate, enforce, a wrapped
   * call, waitForApproval) for this long, and opened again by the next call, so that it never keeps
   * a finished Node process alive for ever (default 60000 ms; close() ends it at once).
   */
  streamIdleMs?: number;
  /**
   * A cached policy is used for at most this long after it was last known current: when it was
   * fetched, or the last byte (event or heartbeat) the event stream it was fetched under delivered.
   * The service sends a heartbeat every 15 s: below that, a quiet stream means refetching policies.
   * Default 30000 ms.
   */
  maxStalenessMs?: number;
  /**
   * A cached policy is used for at most this long after it was fetched, then fetched again before
   * the call is decided, whatever the event stream delivered: the stream only vouches for the events
   * the service delivered to it, and one lost on the service's side (a failed publish between its
   * instances, a reconnection gap there) would otherwise leave the old policy in use for as long as
   * the stream stays up. A number no less than `maxStalenessMs` (else createClient throws SvcError).
   * Default 300000 ms (5 minutes), or `maxStalenessMs` when that is longer.
   */
  maxPolicyAgeMs?: number;
  /**
   * Tools whose policy is cached at most (default 10000; a whole number or Infinity, else
   * createClient throws SvcError). Past it, the tool read least recently is dropped from the cache,
   * and its policy fetched again at its next call.
   */
  maxCachedPolicies?: number;
  /** Default `deny`: fail closed. Any other value than the three makes createClient throw SvcError. */
  onUnavailable?: UnavailableBehaviour;
  /** Per HTTP request; default 10000 ms. */
  requestTimeoutMs?: number;
  /** Retries of a validation on 429/503/network errors (default 2). */
  maxRetries?: number;
  /** A Retry-After longer than this is not waited for by validate (default 5000 ms). */
  maxRetryDelayMs?: number;
  /** Background decision log. */
  log?: {
    /** Decisions per request (1-500, default 500; a whole number, else createClient throws SvcError). */
    batchSize?: number;
    /**
     * How often a batch short of batchSize is sent (default 1000 ms): a decision waits about this
     * long (plus the request under way, if any) before it is sent; a full batch goes at once.
     */
    flushIntervalMs?: number;
    /**
     * Local decisions held at most while they wait to be recorded (default 100,000; a whole number
     * or Infinity, else createClient throws SvcError; 0 holds 1 as the smallest bound). The service
     * records about 1,000 client decisions per second per key; beyond this many waiting, calls are
     * not decided locally (see `whenFull`).
     */
    maxBuffered?: number;
    /**
     * What a call does while the log is full: `server` (default) is decided by the service, which
     * records it itself; `wait` waits until the log has room, then decides locally; `throw` throws
     * LogFullError (fail closed: the tool does not run). No answered decision is ever dropped.
     */
    whenFull?: 'server' | 'wait' | 'throw';
    /**
     * Copy the arguments and context of a local decision when it is taken (true, default: the log
     * records exactly what was decided). false keeps references to plain JSON data and serializes
     * them when the batch is sent (nothing copied on the decision path): only for code that never
     * changes an arguments or context object after the call — `wrap` passes the same object to the
     * tool, so a tool that edits its input in place would be logged as edited. Either way, arguments
     * that are not plain JSON data are written as JSON at the call (the decision is taken on that),
     * and what cannot be written as JSON makes the call throw before the tool runs.
     */
    snapshot?: boolean;
  };
  /**
   * close() gives up flushing after this long and throws FlushError (default 30000 ms); the flush at
   * exit waits as long. A retry the log was waiting for is made at once when either starts, and no
   * later wait passes this bound (a service's Retry-After that ends within it is waited for).
   */
  closeTimeoutMs?: number;
  approvals?: Omit<ApprovalWaitOptions, 'signal'>;
  /** Called when the event stream connects (true) or drops (false). An error it throws goes to onError. */
  onStreamChange?: (connected: boolean) => void;
  /** Errors of background work (event stream, decision log); default: ignored. An error it throws is ignored. */
  onError?: (error: Error) => void;
  /**
   * A fetch implementation (default: the global one). It is called as a plain function, never as a
   * method: a browser's `window.fetch` can be passed as it is. Like `onError` and `onStreamChange`,
   * anything else than a function (or unset) makes createClient throw SvcError.
   */
  fetch?: typeof fetch;
}

export interface Approval {
  id: string;
  status: 'pending' | 'approved' | 'denied' | 'expired';
  toolName: string;
  decisionId?: string | null;
  resolvedBy?: string;
  resolvedAt?: string;
  expiresAt?: string;
  createdAt?: string;
}

export type ToolArgs = Record<string, unknown>;
export type CallContext = Record<string, unknown>;

export interface WrapOptions<A extends unknown[]> {
  /** Maps the wrapped function's parameters to the tool arguments (default: the first parameter). */
  args?: (...params: A) => ToolArgs;
  /** Context sent with each call (session_id, agent_id, ...), or a function of the parameters. */
  context?: CallContext | ((...params: A) => CallContext);
  approval?: Omit<ApprovalWaitOptions, 'signal'>;
}

export interface Client {
  /** `context` null is no context, as undefined. */
  validate(toolName: string, args: ToolArgs, context?: CallContext): Promise<ValidationResult>;
  /**
   * Validates and resolves with the allowing result: throws DeniedError on deny, waits for a person
   * on require_approval (then validates again with the approval). Adapters are built on it.
   */
  enforce(
    toolName: string,
    args: ToolArgs,
    context?: CallContext,
    approval?: ApprovalWaitOptions,
  ): Promise<ValidationResult>;
  wrap<A extends unknown[], R>(
    toolName: string,
    fn: (...params: A) => R | Promise<R>,
    options?: WrapOptions<A>,
  ): (...params: A) => Promise<R>;
  waitForApproval(approvalId: string, options?: ApprovalWaitOptions): Promise<Approval>;
  /**
   * Sends every local decision logged so far; resolves when the server has recorded them (decisions
   * taken after the call are not waited for). Rejects with the service's ApiError (400
   * `missing_project`, or a 404 when POST /v1/decisions is not at `baseUrl`) once the log was
   * refused as a whole: those decisions can never be recorded (close() hands them back in
   * FlushError).
   */
  flush(): Promise<void>;
  /**
   * Stops the event stream and flushes the log; no local decision is dropped. Calls still being
   * decided are waited for (within closeTimeoutMs) and their local decisions flushed too; one still
   * undecided then throws SvcError rather than answer unrecorded. Every call answers the same
   * promise: a second close() resolves (or throws FlushError) when the first does.
   */
  close(): Promise<void>;
}
