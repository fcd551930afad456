import { evaluate } from '@svc/policy-engine';
import {
  ApprovalDeniedError,
  ApprovalTimeoutError,
  DeniedError,
  LogFullError,
  ServiceUnavailableError,
  SvcError,
} from './errors.js';
import {
  apiError,
  createHttp,
  fromService,
  type Http,
  isRetryable,
  notFromService,
  notTheService,
  retryDelay,
  sleep,
  timerMs,
  unref,
} from './http.js';
import { AS_IS, localInput, type Projected, plainInput, validToolName } from './input.js';
import { ALLOW, DENY, DecisionLog } from './log.js';
import type {
  Approval,
  ApprovalWaitOptions,
  CallContext,
  Client,
  ClientOptions,
  FailedConstraint,
  ToolArgs,
  ValidationResult,
  WrapOptions,
} from './model.js';
import { type CachedPolicy, MAX_CACHED_POLICIES, MAX_POLICY_AGE_MS, PolicyCache } from './policies.js';
import { EventStream } from './stream.js';

// The server's reasons, word for word, so a local answer reads exactly as the server's would.
const ALLOWED = 'Allowed: every constraint is satisfied';
const noPolicy = (tool: string) => `No policy for tool "${tool}"; allowed without checks`;
const inactive = (tool: string) => `Policy for tool "${tool}" is inactive; allowed without checks`;
/** A call the cached policy escalates, or whose approval must be checked, while the service is unreachable. */
const approvalUnreachable = (policyReason: string) =>
  `The service is unreachable, so the approval this call needs can be neither requested nor checked: denied (fail closed). ${policyReason}`;

const NO_FAILURES: readonly FailedConstraint[] = Object.freeze([]);
/** Every local allow is this one frozen object: the hot path allocates no result. */
const ALLOWED_LOCALLY: ValidationResult = Object.freeze({
  decision: 'allow',
  reason: ALLOWED,
  failedConstraints: NO_FAILURES,
  source: 'local',
});

interface ValidateAnswer {
  decision: ValidationResult['decision'];
  reason?: string;
  failed_constraints?: FailedConstraint[];
  approval_id?: string;
  metadata?: { decision_id?: string };
}

/** The decisions the API answers; anything else in a 200 is not an answer (see viaServer). */
const DECISIONS: ReadonlySet<unknown> = new Set<ValidationResult['decision']>([
  'allow',
  'deny',
  'require_approval',
]);

const isPlainObject = (v: unknown): v is ToolArgs => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A refused option's value in its error: a string quoted (the string 'false' is no false). */
function shown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}

/**
 * An option, or its default when unset (undefined or null). Anything else than a value `ok`
 * accepts throws, saying what it `must be`: a wrong value is never read as something else (the
 * string 'false' as true, 'thorw' as deny, '2' as a number, a fetch that is no function as the
 * service being unreachable, which `onUnavailable: 'allow'` would answer with an allow).
 */
function option<T>(
  name: string,
  value: unknown,
  fallback: T,
  ok: (v: unknown) => boolean,
  mustBe: string,
): T {
  if (value === undefined || value === null) return fallback;
  if (!ok(value)) throw new SvcError(`${name} must be ${mustBe}, not ${shown(value)}`);
  return value as T;
}

/**
 * A numeric option (see option): a timeout of NaN or 0 would fail every request, and NaN retries
 * would never ask the service, so every call would get the `onUnavailable` answer while the
 * service is up.
 */
const numberOption = (
  name: string,
  value: unknown,
  fallback: number,
  ok: (n: number) => boolean,
  mustBe: string,
): number => option(name, value, fallback, (v) => typeof v === 'number' && ok(v), mustBe);

/** A boolean option (see option): `true` or `false`, nothing truthy or falsy. */
const booleanOption = (name: string, value: unknown, fallback: boolean): boolean =>
  option(name, value, fallback, (v) => typeof v === 'boolean', 'true or false');

/** A callback option (see option): a function, or unset. */
const functionOption = <F>(name: string, value: F | null | undefined): F | undefined =>
  option<F | undefined>(name, value, undefined, (v) => typeof v === 'function', 'a function');

/** An option that is one of `choices`, spelled exactly; unset, the first (see option). */
const choiceOption = <C extends string>(name: string, value: unknown, choices: readonly [C, ...C[]]): C =>
  option(
    name,
    value,
    choices[0],
    (v) => (choices as readonly unknown[]).includes(v),
    `${choices.slice(0, -1).join(', ')} or ${choices.at(-1)}`,
  );

const ABOVE_ZERO = [(n: number) => n > 0, 'a number above 0'] as const;
const AT_LEAST_ZERO = [(n: number) => n >= 0, 'a number of at least 0'] as const;
/** A count (of retries, of decisions per request): 1.5 is none, and Infinity would never end. */
const WHOLE = [(n: number) => Number.isSafeInteger(n) && n >= 0, 'a whole number of at least 0'] as const;
/** A bound on what is held (decisions, policies): a count, or Infinity for none. */
const WHOLE_OR_INFINITY = [
  (n: number) => n === Number.POSITIVE_INFINITY || WHOLE[0](n),
  'a whole number of at least 0, or Infinity',
] as const;

export function createClient(options: ClientOptions): Client {
  if (!options?.apiKey || !options.baseUrl) throw new SvcError('createClient needs apiKey and baseUrl');
  const userOnError = functionOption('onError', options.onError);
  const userOnStreamChange = functionOption('onStreamChange', options.onStreamChange);
  /** The user's callbacks run inside our background work: one that throws must not crash the program. */
  const onError = (err: unknown) => {
    try {
      userOnError?.(err instanceof Error ? err : new Error(String(err)));
    } catch {
      // nowhere left to report it
    }
  };
  const onStreamChange = (up: boolean) => {
    try {
      userOnStreamChange?.(up);
    } catch (err) {
      onError(err);
    }
  };
  // The user's fetch is called as a plain function (a browser's window.fetch refuses any other `this`).
  const userFetch = functionOption('fetch', options.fetch);
  const fetchImpl: typeof fetch = userFetch
    ? (input, init) => userFetch(input, init)
    : (input, init) => globalThis.fetch(input, init);
  const http: Http = createHttp({
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    fetch: fetchImpl,
    timeoutMs: numberOption('requestTimeoutMs', options.requestTimeoutMs, 10_000, ...ABOVE_ZERO),
  });
  const localValidation = booleanOption('localValidation', options.localValidation, true);
  const live = booleanOption('live', options.live, true);
  // Anything else ('ALLOW', 'thorw') would silently behave as 'deny'.
  const onUnavailable = choiceOption('onUnavailable', options.onUnavailable, ['deny', 'allow', 'throw']);
  // A count of retries: Infinity would never give up on a service that is down (never reaching
  // onUnavailable), and 1.5 is no count.
  const maxRetries = numberOption('maxRetries', options.maxRetries, 2, ...WHOLE);
  const maxRetryDelayMs = numberOption('maxRetryDelayMs', options.maxRetryDelayMs, 5000, ...AT_LEAST_ZERO);
  // Checked here and per wait: a NaN interval would poll without pause, a NaN timeout never end.
  const approvalDefaults = {
    pollIntervalMs: numberOption(
      'approvals.pollIntervalMs',
      options.approvals?.pollIntervalMs,
      2000,
      ...AT_LEAST_ZERO,
    ),
    timeoutMs: numberOption('approvals.timeoutMs', options.approvals?.timeoutMs, 300_000, ...AT_LEAST_ZERO),
  };
  const maxStalenessMs = numberOption('maxStalenessMs', options.maxStalenessMs, 30_000, ...AT_LEAST_ZERO);
  // Unset, it is never shorter than maxStalenessMs.
  const maxPolicyAgeMs = numberOption(
    'maxPolicyAgeMs',
    options.maxPolicyAgeMs,
    Math.max(MAX_POLICY_AGE_MS, maxStalenessMs),
    (n) => n >= maxStalenessMs,
    `a number of ms no less than maxStalenessMs (${String(maxStalenessMs)})`,
  );
  const cache = new PolicyCache(
    http,
    maxStalenessMs,
    undefined,
    // NaN would make the cache's eviction loop run for ever.
    numberOption('maxCachedPolicies', options.maxCachedPolicies, MAX_CACHED_POLICIES, ...WHOLE_OR_INFINITY),
    maxPolicyAgeMs,
  );
  const closeTimeoutMs = numberOption('closeTimeoutMs', options.closeTimeoutMs, 30_000, ...AT_LEAST_ZERO);
  const log = new DecisionLog(http, {
    // A count of decisions per request: 1.5 would send batches of 2.
    batchSize: numberOption('log.batchSize', options.log?.batchSize, 500, ...WHOLE),
    flushIntervalMs: numberOption(
      'log.flushIntervalMs',
      options.log?.flushIntervalMs,
      1000,
      ...AT_LEAST_ZERO,
    ),
    // A count of decisions held: 1.5 would hold 1.
    maxBuffered: numberOption('log.maxBuffered', options.log?.maxBuffered, 100_000, ...WHOLE_OR_INFINITY),
    exitTimeoutMs: closeTimeoutMs,
    onError,
  });
  const whenFull = choiceOption('log.whenFull', options.log?.whenFull, ['server', 'wait', 'throw']);
  const snapshot = booleanOption('log.snapshot', options.log?.snapshot, true);
  const waiters = new Map<string, Set<() => void>>();
  let closed = false;
  let closing: Promise<void> | null = null;

  /**
   * Calls still being decided that may yet answer locally (a policy to fetch, the service to ask, room
   * in the log to wait for): close() waits for them before the log is sealed, so that what they
   * answer is recorded. The hot path answers before validate returns, and is never among them.
   */
  let calls = 0;
  let callsDone: (() => void)[] = [];
  const decided = () => {
    if (--calls > 0) return;
    const done = callsDone;
    callsDone = [];
    for (const wake of done) wake();
  };
  function tracked(p: Promise<ValidationResult>): Promise<ValidationResult> {
    calls++;
    p.then(decided, decided);
    return p;
  }
  /** Settles (never rejects) once no call is being decided. */
  const noCalls = () =>
    calls === 0 ? Promise.resolve() : new Promise<void>((resolve) => callsDone.push(resolve));

  const refresh = (tool: string) => {
    cache.load(tool).catch(onError);
  };
  const stream =
    localValidation && live
      ? new EventStream(http, {
          onConnect: () => {
            for (const tool of cache.connected()) refresh(tool);
            onStreamChange(true);
          },
          onDisconnect: () => {
            cache.disconnected();
            onStreamChange(false);
          },
          onEvent: (type, data) => {
            const d = data as { toolName?: unknown; approvalId?: unknown };
            if (type.startsWith('policy.') && typeof d.toolName === 'string') {
              if (cache.changed(d.toolName)) refresh(d.toolName);
            } else if (typeof d.approvalId === 'string') {
              for (const wake of waiters.get(d.approvalId) ?? []) wake();
            }
          },
          onBytes: () => cache.heard(),
          onError,
        })
      : null;

  // The open stream would keep a Node process alive for ever: it is closed once the client has not
  // been used for streamIdleMs, and opened again by the next call.
  const streamIdleMs = numberOption('streamIdleMs', options.streamIdleMs, 60_000, ...AT_LEAST_ZERO);
  let lastUse = performance.now();
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  const checkIdle = () => {
    const idle = performance.now() - lastUse;
    if (idle >= streamIdleMs) {
      idleTimer = undefined;
      stream?.stop().catch(onError);
      return;
    }
    idleTimer = setTimeout(checkIdle, timerMs(streamIdleMs - idle));
    unref(idleTimer);
  };
  /** The client is being used at `now`: the stream is kept, or opened again. */
  const used = (now: number) => {
    lastUse = now;
    if (stream !== null && !stream.running && !closed) {
      stream.start();
      clearTimeout(idleTimer);
      idleTimer = setTimeout(checkIdle, timerMs(streamIdleMs));
      unref(idleTimer);
    }
  };
  used(lastUse);

  /**
   * Records a decision taken here in the background log (DecisionLog.add: what it keeps): the
   * caller's objects, or the JSON text of their projection when the decision was taken on that.
   */
  function logLocal(
    tool: string,
    args: ToolArgs,
    context: CallContext | undefined,
    projected: Projected | null,
    r: ValidationResult,
    started: number,
    policy?: CachedPolicy,
  ) {
    // close() no longer waits for this call: an answer given now would never be recorded.
    if (log.sealed) {
      throw new SvcError(
        `the client was closed while the call to "${tool}" was being decided: its decision could not be recorded, so it is not answered`,
      );
    }
    log.add(
      tool,
      projected === null ? args : projected.argsText,
      projected === null ? context : projected.ctxText,
      r.decision === 'allow' ? ALLOW : DENY,
      r.reason,
      r.decision === 'deny' && policy?.kind === 'local' ? policy.compiled : undefined,
      performance.now() - started,
      snapshot,
    );
  }

  /**
   * A local decision was taken but the log holds `maxBuffered` decisions already: it is not
   * answered from here (it could not be recorded). `server` decides on the service, which records
   * the decision itself (should the service be unreachable, the local decision is the answer, kept
   * beyond the bound like every answer given during an outage); `wait` waits until the log has room
   * and decides again; `throw` fails closed.
   */
  async function logIsFull(
    tool: string,
    args: ToolArgs,
    context: CallContext | undefined,
    started: number,
    local: ValidationResult,
    policy: CachedPolicy,
  ): Promise<ValidationResult> {
    if (whenFull === 'throw') {
      throw new LogFullError(
        `${log.pending} local decisions are waiting to be recorded (log.maxBuffered); the call was not decided`,
      );
    }
    if (whenFull === 'wait') {
      await log.room();
      if (closed) throw new SvcError('the client is closed');
      return validate(tool, args, context);
    }
    return serverOrFallback(tool, args, context, started, local, policy);
  }

  /**
   * What a fresh cached policy says of the call, or null when only the server can tell (policy kind
   * `server`). A `require_approval` is never an answer by itself: see needsServer.
   */
  function decideLocally(policy: CachedPolicy, tool: string, args: ToolArgs): ValidationResult | null {
    switch (policy.kind) {
      case 'none':
        return { decision: 'allow', reason: noPolicy(tool), failedConstraints: NO_FAILURES, source: 'local' };
      case 'inactive':
        return { decision: 'allow', reason: inactive(tool), failedConstraints: NO_FAILURES, source: 'local' };
      case 'server':
        return null;
      case 'local': {
        const e = evaluate(policy.compiled, args);
        if (e.decision === 'allow') return ALLOWED_LOCALLY;
        return {
          decision: e.decision,
          reason: e.reason!,
          failedConstraints: e.failedConstraints,
          source: 'local',
        };
      }
    }
  }

  /**
   * Approvals live on the server: an escalation, and a call presenting an approval that the policy
   * does not simply allow, are decided there. The local outcome is still what the call gets should
   * the service be unreachable (serverOrFallback).
   */
  const needsServer = (local: ValidationResult, context: CallContext | undefined) =>
    local.decision === 'require_approval' ||
    (local.decision !== 'allow' && context?.approval_id !== undefined);

  async function viaServer(
    tool: string,
    args: ToolArgs,
    context: CallContext | undefined,
  ): Promise<ValidationResult> {
    // Sent as given: what the service refuses (a context that is no object...) it answers with its error.
    const body = JSON.stringify({
      tool_name: tool,
      arguments: args,
      ...(context !== undefined ? { context } : {}),
    });
    let lastError: unknown;
    for (let attempt = 0; attempt <= maxRetries; attempt++) {
      let wait: number;
      try {
        const res = await http.request('POST', '/v1/tools/validate', body);
        if (res.status === 200) {
          const a = res.body as ValidateAnswer | null;
          // Only the API's three decisions are answers: anything else (a proxy's page, `{}`, "ALLOW")
          // would reach a caller testing `decision !== 'deny'` as a go-ahead.
          if (!a || !DECISIONS.has(a.decision)) {
            throw new ServiceUnavailableError('the service answered something that is not a decision');
          }
          return {
            decision: a.decision,
            reason: a.reason ?? '',
            failedConstraints: a.failed_constraints ?? NO_FAILURES,
            ...(a.approval_id ? { approvalId: a.approval_id } : {}),
            ...(a.metadata?.decision_id ? { decisionId: a.metadata.decision_id } : {}),
            source: 'server',
          };
        }
        // No route of the service answers this with a 404: the base URL or a proxy is wrong.
        if (res.status === 404) throw notTheService('POST', http.url('/v1/tools/validate'), res);
        const err = apiError(res);
        if (!isRetryable(res.status)) {
          // Only the service's own refusal (its error envelope) is a verdict on the call. A proxy's
          // 5xx page is the service not answering: not retried (it would answer the same), and the
          // call is answered as in an outage. A proxy's 4xx page (its body limit, a WAF rule, its
          // own authentication) may depend on what the call holds, so an agent could bring it about:
          // it is never an outage, whose answer may allow, and throws ApiError (code http_<status>).
          if (res.status >= 500 && !fromService(res)) {
            throw notFromService('POST', http.url('/v1/tools/validate'), res);
          }
          throw err;
        }
        lastError = err;
        wait = retryDelay(attempt, res.headers, maxRetryDelayMs);
        if (wait > maxRetryDelayMs) break;
      } catch (err) {
        if (err instanceof SvcError) throw err;
        lastError = err;
        wait = retryDelay(attempt, null, maxRetryDelayMs);
      }
      if (attempt < maxRetries) await sleep(wait);
    }
    throw new ServiceUnavailableError(
      `the service could not decide: ${(lastError as Error)?.message ?? lastError}`,
      {
        cause: lastError,
      },
    );
  }

  /**
   * A call the hot path could not decide: no fresh policy (fetched here), or arguments or context
   * that are not plain JSON data. Those are decided on their JSON projection (what the service would
   * see and the log records), unless the service would refuse them or could not record the
   * decision: then the service answers (its error, for what it refuses).
   */
  async function slowPath(
    tool: string,
    args: ToolArgs,
    context: CallContext | undefined,
    started: number,
    fresh: CachedPolicy | undefined,
  ) {
    if (localValidation && isPlainObject(args) && validToolName(tool)) {
      const policy = fresh ?? (await cache.load(tool).catch(() => null));
      // The log may have been refused meanwhile (see validate): then nothing is decided here.
      const input =
        policy && policy.kind !== 'server' && log.refusal === null ? localInput(args, context) : null;
      if (input !== null) {
        const projected = input === AS_IS ? null : input;
        const local = decideLocally(policy!, tool, projected === null ? args : projected.args)!;
        if (needsServer(local, projected === null ? context : projected.context)) {
          return serverOrFallback(tool, args, context, started, local, policy!);
        }
        if (log.full) return logIsFull(tool, args, context, started, local, policy!);
        logLocal(tool, args, context, projected, local, started, policy!);
        return local;
      }
    }
    return serverOrFallback(tool, args, context, started);
  }

  /**
   * The service decides. Should it be unreachable, the call is answered here and recorded like any
   * local decision (even beyond log.maxBuffered: it was answered, so it is kept): from `local`, what
   * a fresh cached policy says of it (a deny stays a deny, with the policy's reason; a call needing
   * an approval is denied, since the approval can be neither requested nor checked; an allow taken
   * while the log was full stays an allow), or without one as `onUnavailable` says.
   */
  async function serverOrFallback(
    tool: string,
    args: ToolArgs,
    context: CallContext | undefined,
    started: number,
    local?: ValidationResult,
    policy?: CachedPolicy,
  ): Promise<ValidationResult> {
    try {
      return await viaServer(tool, args, context);
    } catch (err) {
      if (!(err instanceof ServiceUnavailableError)) throw err;
      if (local === undefined && onUnavailable === 'throw') throw err;
      // An answer given here must be recorded: a call the service would refuse, or whose decision it
      // could not record (the log refused by the service included), gets no answer but the outage.
      const input =
        log.refusal === null && isPlainObject(args) && validToolName(tool) ? localInput(args, context) : null;
      if (input === null) throw err;
      onError(err);
      let result: ValidationResult;
      let decidedBy: CachedPolicy | undefined;
      if (local === undefined) {
        result = {
          decision: onUnavailable === 'allow' ? 'allow' : 'deny',
          reason: `The service is unreachable and no fresh policy is cached: ${onUnavailable === 'allow' ? 'allowed (fail open)' : 'denied (fail closed)'}`,
          failedConstraints: NO_FAILURES,
          source: 'local',
        };
      } else if (local.decision === 'require_approval') {
        // Its reason is not the policy's: logged as it is, not evaluated again from the policy.
        result = {
          decision: 'deny',
          reason: approvalUnreachable(local.reason),
          failedConstraints: local.failedConstraints,
          source: 'local',
        };
      } else {
        result = local;
        decidedBy = policy;
      }
      logLocal(tool, args, context, input === AS_IS ? null : input, result, started, decidedBy);
      return result;
    }
  }

  async function validate(tool: string, args: ToolArgs, context?: CallContext): Promise<ValidationResult> {
    if (closed) throw new SvcError('the client is closed');
    const started = performance.now();
    // null is no context, as undefined (on the service too: viaServer leaves it out).
    const ctx = context ?? undefined;
    let policy: CachedPolicy | undefined;
    if (localValidation) {
      used(started);
      // The service refused the log (a key without a project, or a log URL no route answers): no
      // local decision could ever be recorded, so every call goes to the service, which decides and
      // records it.
      if (log.refusal !== null) return tracked(serverOrFallback(tool, args, ctx, started));
      policy = cache.fresh(tool, started);
      // The hot path: a fresh policy and plain JSON data the service accepts, decided as they are.
      if (policy !== undefined && policy.kind !== 'server' && isPlainObject(args) && plainInput(args, ctx)) {
        const local = decideLocally(policy, tool, args)!;
        // An escalation, or an approval to present: only the service may answer.
        if (needsServer(local, ctx)) {
          return tracked(serverOrFallback(tool, args, ctx, started, local, policy));
        }
        if (log.full) return tracked(logIsFull(tool, args, ctx, started, local, policy));
        logLocal(tool, args, ctx, null, local, started, policy);
        return local;
      }
    }
    return tracked(slowPath(tool, args, ctx, started, policy));
  }

  async function waitForApproval(approvalId: string, opts: ApprovalWaitOptions = {}): Promise<Approval> {
    const interval = numberOption(
      'pollIntervalMs',
      opts.pollIntervalMs,
      approvalDefaults.pollIntervalMs,
      ...AT_LEAST_ZERO,
    );
    const timeout = numberOption('timeoutMs', opts.timeoutMs, approvalDefaults.timeoutMs, ...AT_LEAST_ZERO);
    const deadline = Date.now() + timeout;
    const path = `/v1/approvals/${encodeURIComponent(approvalId)}`;
    for (;;) {
      opts.signal?.throwIfAborted();
      used(performance.now()); // the stream wakes the wait early
      try {
        const res = await http.request('GET', path, undefined, opts.signal);
        if (res.status !== 200 && !isRetryable(res.status)) throw apiError(res);
        if (res.status === 200) {
          const a = res.body as Approval;
          if (a.status === 'approved') return a;
          if (a.status === 'denied') throw new ApprovalDeniedError(approvalId, a.resolvedBy ?? null);
          if (a.status === 'expired') throw new ApprovalTimeoutError(approvalId, true);
        }
      } catch (err) {
        if (err instanceof SvcError || opts.signal?.aborted) throw err;
        onError(err as Error); // a network blip: keep waiting until the deadline
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new ApprovalTimeoutError(approvalId, false);
      await wakeOrSleep(approvalId, Math.min(interval, left), opts.signal);
    }
  }

  /** Sleeps, or wakes early when the event stream announces the approval's resolution. */
  function wakeOrSleep(approvalId: string, ms: number, signal?: AbortSignal): Promise<void> {
    const stop = new AbortController();
    const wake = () => stop.abort();
    const set = waiters.get(approvalId) ?? new Set();
    waiters.set(approvalId, set);
    set.add(wake);
    signal?.addEventListener('abort', wake, { once: true });
    return sleep(ms, stop.signal).finally(() => {
      set.delete(wake);
      if (set.size === 0) waiters.delete(approvalId);
      signal?.removeEventListener('abort', wake);
    });
  }

  async function enforce(
    tool: string,
    args: ToolArgs,
    context?: CallContext,
    approval?: ApprovalWaitOptions,
  ): Promise<ValidationResult> {
    let r = await validate(tool, args, context);
    if (r.decision === 'require_approval') {
      if (!r.approvalId) throw new DeniedError(tool, r.reason, r.failedConstraints, r.decisionId);
      await waitForApproval(r.approvalId, approval);
      r = await validate(tool, args, { ...context, approval_id: r.approvalId });
    }
    if (r.decision === 'allow') return r;
    throw new DeniedError(tool, r.reason, r.failedConstraints, r.decisionId);
  }

  return {
    validate,
    enforce,
    waitForApproval,
    wrap<A extends unknown[], R>(
      tool: string,
      fn: (...params: A) => R | Promise<R>,
      wrapOptions: WrapOptions<A> = {},
    ) {
      return async (...params: A): Promise<R> => {
        const args = wrapOptions.args ? wrapOptions.args(...params) : ((params[0] ?? {}) as ToolArgs);
        const ctx =
          typeof wrapOptions.context === 'function' ? wrapOptions.context(...params) : wrapOptions.context;
        await enforce(tool, args, ctx, wrapOptions.approval);
        return fn(...params);
      };
    },
    flush: () => log.flush(),
    close() {
      // Every caller waits for the same flush, and sees its outcome.
      closing ??= (async () => {
        closed = true;
        clearTimeout(idleTimer);
        await stream?.stop();
        // Calls still being decided are waited for (within the timeout), so what they answer locally
        // is recorded; one still undecided then throws rather than answer unrecorded.
        await log.close(closeTimeoutMs, noCalls());
      })();
      return closing;
    },
  };
}
