import { type CompiledPolicy, evaluate, MAX_BODY_BYTES, utf8Length } from '@svc/policy-engine';
import { ApiError, FlushError, LogRejectedError } from './errors.js';
import { atExit } from './exit.js';
import {
  apiError,
  fromService,
  type Http,
  isRetryable,
  notTheService,
  retryAfter,
  retryDelay,
  sleep,
  timerMs,
  unref,
} from './http.js';

/** The server's batch bound (POST /v1/decisions) and a body size (UTF-8 bytes) under its limit. */
export const MAX_BATCH = 500;
const MAX_BATCH_BYTES = MAX_BODY_BYTES - 1024;
const MAX_BACKOFF_MS = 60_000;
const MAX_REASON = 2000;

export interface DecisionLogOptions {
  batchSize: number;
  flushIntervalMs: number;
  /** Local decisions held at most before `full` is true (the client then stops deciding locally). */
  maxBuffered: number;
  /** How long the flush when the process is about to exit may keep it alive (flushAtExit). */
  exitTimeoutMs: number;
  onError: (error: Error) => void;
}

const DECISION_NAMES = ['allow', 'deny'] as const;
export const ALLOW = 0;
export const DENY = 1;

/**
 * Local decisions on their way to POST /v1/decisions. Each is held as a compact record (its fields
 * in parallel ring arrays: the tool, the arguments and context as the JSON text taken when the
 * decision was made, the decision, the reason, the latency); the request bodies are written only
 * when a batch is sent. Batches go in order, one request at a time (each one request against the
 * rate limit), retried with backoff (honouring Retry-After) until the server has recorded them.
 * A batch goes once `flushIntervalMs` has passed since the first decision waiting was added (or since
 * the last request ended, when decisions were left), or at once when a full batch waits (batchSize,
 * or maxBuffered if smaller) and while flush(), close() or the flush at exit wait for it. A
 * batch carries one Idempotency-Key, the same on every attempt, so a retry after a lost answer is
 * answered from the first attempt instead of recording the batch again.
 *
 * The buffer is bounded: once `maxBuffered` decisions wait, `full` is true and the client must not
 * add local decisions (it decides on the server, waits, or throws: ClientOptions.log.whenFull).
 * `add` itself never refuses: the few decisions taken while the service is unreachable (after its
 * retries) are kept even beyond the bound, as is anything acknowledged.
 *
 * A batch the server refuses is split only to find the decision at fault: the one its error names
 * (`body/<index>/...`), else by halving (413, or another 400). Only a refusal in the service's
 * error envelope counts: a 400 or 413 page of a proxy or load balancer is reported and retried, as
 * a 401 is. A refusal of the request itself (400 `missing_project`: the API key has no project, so
 * no client decision of it can ever be recorded; a 404: the URL is not the service's route) is
 * `refusal`: nothing more is sent, the decisions are kept (close() hands them back) and the client
 * decides every call on the service from then on.
 */
export class DecisionLog {
  /**
   * Records in fixed-size chunks of parallel arrays: appending never copies what is held, and a
   * chunk is let go of as soon as all its records are recorded.
   */
  private chunks: Chunk[] = [];
  /** Position of the oldest record in chunks[0], and how many records there are. */
  private head = 0;
  private size = 0;
  private sending: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Callers of room(), woken whenever records leave the buffer. */
  private roomWaiters: (() => void)[] = [];
  /** Callers of flush(), woken whenever records leave the buffer or a request ends. */
  private flushWaiters: (() => void)[] = [];
  /** Aborts the backoff sleep when close() runs out of time. */
  private readonly giveUp = new AbortController();
  /**
   * The service refused the log as a whole (400 missing_project, or 404: POST /v1/decisions is not
   * at this URL): no decision it holds can be recorded. The client no longer decides locally once
   * this is set.
   */
  refusal: ApiError | null = null;
  /**
   * close() runs or ran: once the calls it waits for are done, nothing more may be added (a decision
   * added then could be left unsent with close() already settled). The client answers such a call
   * with an error rather than unrecorded.
   */
  sealed = false;
  /**
   * While close() or the flush at exit runs: when it must be done by (performance.now()), so that
   * no backoff sleep passes it; `hurried` counts their starts, each of which restarts the backoff.
   */
  private deadline: number | null = null;
  private hurried = 0;
  /** The backoff sleep under way: its end, whether a server's Retry-After set it, and its wake-up. */
  private nap: { until: number; fromServer: boolean; wake: AbortController } | null = null;
  /** Unregisters the flush at exit, registered while decisions wait (so a drained log is not held). */
  private leaveExit: (() => void) | null = null;
  private exiting = false;
  /**
   * The flush at exit ran out of time and nothing was recorded since: the next exit does not wait
   * again. `reportedAt` is `added` when it reported what was left (reported again only with more).
   */
  private exitGaveUp = false;
  private reportedAt = -1;
  /** Decisions ever added. */
  private added = 0;
  private readonly batchSize: number;
  /** Decisions waiting that are sent at once rather than at the flush timer: a full batch. */
  private readonly sendAt: number;
  readonly maxBuffered: number;

  constructor(
    private readonly http: Http,
    private readonly options: DecisionLogOptions,
  ) {
    this.batchSize = Math.max(1, Math.min(MAX_BATCH, options.batchSize));
    this.maxBuffered = Math.max(1, Math.floor(options.maxBuffered));
    this.sendAt = Math.min(this.batchSize, this.maxBuffered);
  }

  /** True once `maxBuffered` decisions wait to be recorded. */
  get full(): boolean {
    return this.size >= this.maxBuffered;
  }

  get pending(): number {
    return this.size;
  }

  /**
   * One local decision. `args` and `context` are the caller's objects, or their JSON text when the
   * client had to write it to decide (held as it is). With `copy` (the client's `log.snapshot`) the
   * log keeps what the objects hold now, so it records what was decided even if the caller changes
   * them afterwards: a plain object of at most MAX_FLAT_KEYS strings, numbers, booleans, nulls and
   * undefineds (what most calls pass) as its keys and values in the chunk's slab (no object
   * allocated per call), anything else as its JSON text, which throws here, before anything is held,
   * for what cannot be serialized. Without `copy` the references are kept and serialized when the
   * batch is sent (no work on the decision path). A denial by a compiled policy is held as that
   * policy (shared, nothing retained per call) when the arguments are held as objects: its reason is
   * evaluated again from them when the batch is written; else as `reason`.
   */
  add(
    tool: string,
    args: object | string,
    context: object | string | undefined,
    decision: typeof ALLOW | typeof DENY,
    reason: string,
    compiled: CompiledPolicy | undefined,
    latencyMs: number,
    copy: boolean,
  ): void {
    const at = this.head + this.size;
    const n = at >> CHUNK_BITS;
    const chunk = n < this.chunks.length ? this.chunks[n]! : this.newChunk();
    const i = at & CHUNK_MASK;
    let a: unknown = args;
    let x: unknown = context;
    if (copy) {
      const slab = chunk.slab;
      const start = slab.length;
      try {
        // A getter may throw (as it would in JSON.stringify): the slab is then put back as it was.
        if (typeof args !== 'string') {
          const argN = hold(slab, args);
          a = argN >= 0 ? FLAT : JSON.stringify(args);
          chunk.argAt[i] = start;
          chunk.argN[i] = argN;
        }
        if (context !== undefined && typeof context !== 'string') {
          const ctxAt = slab.length;
          const ctxN = hold(slab, context);
          x = ctxN >= 0 ? FLAT : JSON.stringify(context);
          chunk.ctxAt[i] = ctxAt;
          chunk.ctxN[i] = ctxN;
        }
      } catch (err) {
        slab.length = start;
        throw err;
      }
    }
    chunk.tools[i] = tool;
    chunk.args[i] = a;
    chunk.contexts[i] = x;
    // Held as JSON text, the arguments cannot be evaluated again: the reason is kept instead.
    chunk.reasons[i] = compiled !== undefined && typeof a !== 'string' ? compiled : reason;
    chunk.decisions[i] = decision;
    chunk.latencies[i] = latencyMs;
    if (this.size === 0 && this.leaveExit === null) {
      this.leaveExit = atExit(() => void this.flushAtExit(this.options.exitTimeoutMs));
    }
    this.size++;
    this.added++;
    if (this.size >= this.sendAt) this.kick();
    // While a request runs, its end decides when the next one goes (see kick).
    else if (this.timer === undefined && this.sending === null) this.arm();
  }

  /** The next request goes in flushIntervalMs. */
  private arm(): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.kick();
    }, timerMs(this.options.flushIntervalMs));
    // Node: a pending flush must not keep the process alive by itself; close(), or the flush
    // when the process is about to exit (flushAtExit), sends what is left.
    unref(this.timer);
  }

  private newChunk(): Chunk {
    const chunk = new Chunk();
    this.chunks.push(chunk);
    return chunk;
  }

  /** Resolves once the buffer has room again (or the log was given up at close, or refused). */
  room(): Promise<void> {
    if (!this.full || this.giveUp.signal.aborted || this.refusal !== null) return Promise.resolve();
    this.kick();
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /**
   * The POST /v1/decisions body of the k-th oldest record; a LogRejectedError instead when its
   * arguments or context cannot be written as JSON (a cycle, a BigInt): it can never be recorded.
   */
  private body(k: number): string | LogRejectedError {
    const at = this.head + k;
    const c = this.chunks[at >> CHUNK_BITS]!;
    const i = at & CHUNK_MASK;
    const held = c.args[i];
    const context = c.contexts[i];
    let reason: string;
    let args: string;
    let ctx: string | undefined;
    try {
      const value = held === FLAT ? unfold(c.slab, c.argAt[i]!, c.argN[i]!) : held;
      const why = c.reasons[i];
      // A denial by a compiled policy: the same evaluation as at decision time, same reason.
      reason =
        typeof why === 'string'
          ? why
          : (evaluate(why as CompiledPolicy, value as Record<string, unknown>).reason ?? '');
      args = json(value);
      ctx =
        context === undefined
          ? undefined
          : json(context === FLAT ? unfold(c.slab, c.ctxAt[i]!, c.ctxN[i]!) : context);
    } catch (err) {
      const what = `{"tool_name":${JSON.stringify(c.tools[i])},"decision":"${DECISION_NAMES[c.decisions[i]!]}"}`;
      return new LogRejectedError(
        what,
        new ApiError(
          0,
          'not_serializable',
          `arguments or context cannot be written as JSON: ${(err as Error).message}`,
        ),
      );
    }
    return (
      `{"tool_name":${JSON.stringify(c.tools[i])},"arguments":${args}` +
      `,"decision":"${DECISION_NAMES[c.decisions[i]!]}"` +
      `,"reason":${JSON.stringify(loggedReason(reason))}` +
      `,"mode":"deterministic","latency_ms":${Math.max(0, c.latencies[i]!)},"source":"client"` +
      `${ctx !== undefined ? `,"context":${ctx}` : ''}}`
    );
  }

  /** Drops the `n` oldest records (recorded, or refused as invalid) and wakes callers waiting for room. */
  private shift(n: number): void {
    for (let k = 0; k < n; k++) {
      const at = this.head + k;
      const c = this.chunks[at >> CHUNK_BITS]!;
      const i = at & CHUNK_MASK;
      // Let go of the caller's objects at once, not when the chunk goes.
      c.tools[i] = c.args[i] = c.contexts[i] = c.reasons[i] = undefined;
    }
    this.head += n;
    this.size -= n;
    const done = this.head >> CHUNK_BITS;
    if (done > 0) {
      this.chunks.splice(0, done);
      this.head &= CHUNK_MASK;
    }
    if (this.size === 0) {
      this.chunks.length = 0;
      this.head = 0;
      this.leaveExit?.();
      this.leaveExit = null;
    }
    if (n > 0 && !this.full) this.wake();
    if (n > 0) this.progressed();
  }

  private progressed(): void {
    const waiters = this.flushWaiters;
    this.flushWaiters = [];
    for (const w of waiters) w();
  }

  private wake(): void {
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const w of waiters) w();
  }

  /**
   * Sends now, unless a request runs already. When it ends with decisions left, the next goes at
   * once only for a full batch; else at the flush timer (flush(), close() and the flush at exit
   * kick again themselves), so that a steady trickle makes one request per flushIntervalMs, not one
   * per round trip.
   */
  private kick(): void {
    if (this.sending !== null || this.giveUp.signal.aborted || this.refusal !== null) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.sending = this.drain()
      // drain reports its errors; nothing it throws may become an unhandled rejection.
      .catch((err: unknown) => this.report(err))
      .finally(() => {
        this.sending = null;
        this.progressed();
        if (this.size === 0 || this.giveUp.signal.aborted || this.refusal !== null) return;
        if (this.size >= this.sendAt) this.kick();
        else if (this.timer === undefined) this.arm();
      });
  }

  /** Hands an error to onError; an onError that throws is not our caller's crash. */
  private report(err: unknown): void {
    try {
      this.options.onError(err instanceof Error ? err : new Error(String(err)));
    } catch {
      // ignored: see above
    }
  }

  /** True once close() (or the flush at exit) gave up: nothing more is sent. */
  get givenUp(): boolean {
    return this.giveUp.signal.aborted;
  }

  /**
   * Resolves once every decision queued before the call is recorded (or refused as invalid); those
   * added meanwhile are not waited for. Rejects with the service's ApiError once it refused the log
   * as a whole (`refusal`) while some of them wait: those can never be recorded (close() hands them
   * back).
   */
  async flush(): Promise<void> {
    // Records leave the buffer oldest first: the first `added` ever added are done once this many
    // have left it.
    const upTo = this.added;
    while (this.added - this.size < upTo && this.refusal === null && !this.giveUp.signal.aborted) {
      this.kick();
      if (this.sending === null) break;
      // Woken by each batch recorded, not by the end of the sending under way: under a steady flow
      // of full batches that may not end.
      await new Promise<void>((resolve) => this.flushWaiters.push(resolve));
    }
    if (this.refusal !== null && this.added - this.size < upTo) throw this.refusal;
  }

  /** Sends until nothing waits, the log is given up, or the service refused it. */
  private async settle(): Promise<void> {
    while ((this.size > 0 || this.sending) && this.refusal === null) {
      this.kick();
      await this.sending;
      if (this.giveUp.signal.aborted) return;
    }
  }

  /**
   * Close (or exit) starts: a backoff sleep under way ends at once, so the next attempt is made
   * now, and from then on no sleep passes `timeoutMs` from now. A sleep for a server's Retry-After
   * that ends within it is kept. Answers the deadline, for unhurry.
   */
  private hurry(timeoutMs: number): number {
    const deadline = performance.now() + timeoutMs;
    this.deadline = deadline;
    this.hurried++;
    const nap = this.nap;
    if (nap !== null && !(nap.fromServer && nap.until <= deadline)) nap.wake.abort();
    return deadline;
  }

  private unhurry(deadline: number): void {
    if (this.deadline === deadline) this.deadline = null;
  }

  /**
   * Flushes within `timeoutMs`, else throws FlushError carrying the decisions not recorded.
   * `calls` settles once the calls still being decided are done: what they add meanwhile is sent
   * too; from then on (or the deadline) the log is `sealed`.
   */
  async close(timeoutMs: number, calls?: Promise<unknown>): Promise<void> {
    const deadline = this.hurry(timeoutMs);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timerMs(timeoutMs));
    });
    const flushed = async () => {
      await Promise.all([this.settle(), calls]);
      this.sealed = true;
      await this.settle();
    };
    await Promise.race([flushed(), timedOut]);
    this.sealed = true;
    clearTimeout(timer);
    this.unhurry(deadline);
    // Every decision added is recorded (a call still undecided at the deadline adds none now).
    if (this.size === 0) return;
    this.giveUp.abort();
    // Nothing more will be sent: nothing is left to do at exit either.
    this.leaveExit?.();
    this.leaveExit = null;
    this.wake();
    await this.sending;
    // The request under way at the deadline may have recorded what was left.
    if (this.size === 0) return;
    const pending = this.pendingBodies();
    throw new FlushError(
      this.refusal !== null
        ? `${pending.length} local decision(s) cannot be recorded: ${refused(this.refusal)}`
        : `${pending.length} local decision(s) could not be recorded within ${timeoutMs} ms`,
      pending,
    );
  }

  /** The decisions not recorded yet, as request bodies. */
  private pendingBodies(): string[] {
    const pending: string[] = [];
    for (let k = 0; k < this.size; k++) {
      const body = this.body(k);
      if (typeof body === 'string') pending.push(body);
    }
    return pending;
  }

  /**
   * The process is about to exit with decisions still waiting (Node's beforeExit): send them, for
   * at most `timeoutMs` (a timer keeps the process alive meanwhile); what could not be sent by then
   * is reported to onError as FlushError. Nothing is given up: should the process go on (more work
   * was scheduled), they are still sent. Until something is recorded again, a later exit reports
   * what waits at once, and only when decisions were added since the last report.
   */
  async flushAtExit(timeoutMs: number): Promise<void> {
    // beforeExit comes again once this flush is done: one at a time.
    if (this.size === 0 || this.givenUp || this.exiting) return;
    if (this.refusal !== null) {
      this.handBackRefused();
      return;
    }
    this.exiting = true;
    try {
      if (!this.exitGaveUp) {
        const deadline = this.hurry(timeoutMs);
        let timer: ReturnType<typeof setTimeout> | undefined;
        const timedOut = new Promise<false>((resolve) => {
          timer = setTimeout(() => resolve(false), timerMs(timeoutMs));
        });
        const done = await Promise.race([this.settle().then(() => true), timedOut]);
        clearTimeout(timer);
        this.unhurry(deadline);
        if (this.refusal !== null) {
          this.handBackRefused();
          return;
        }
        if ((done && this.size === 0) || this.givenUp) return;
        this.exitGaveUp = true;
      }
      if (this.reportedAt === this.added) return;
      this.reportedAt = this.added;
      const pending = this.pendingBodies();
      this.report(
        new FlushError(
          `${pending.length} local decision(s) could not be recorded before the process exits; they are still sent should it go on`,
          pending,
          true,
        ),
      );
    } finally {
      this.exiting = false;
    }
  }

  /**
   * The process exits with decisions the service refused as a whole (`refusal`): they can never be
   * sent, so the log gives them up as close() would, reporting them (kept: false) to onError.
   */
  private handBackRefused(): void {
    const pending = this.pendingBodies();
    this.giveUp.abort();
    this.leaveExit?.();
    this.leaveExit = null;
    this.shift(this.size);
    this.report(
      new FlushError(
        `${pending.length} local decision(s) cannot be recorded: ${refused(this.refusal!)}`,
        pending,
      ),
    );
  }

  /** Sends one batch, and more at once while full batches wait. */
  private async drain(): Promise<void> {
    let sent = false;
    while (this.size > 0 && !this.giveUp.signal.aborted && (!sent || this.size >= this.sendAt)) {
      const bodies = this.nextBatch();
      if (bodies.length === 0) continue; // the oldest records could not be serialized, and are gone
      sent = true;
      const handled = await this.send(bodies);
      this.shift(handled);
      if (handled < bodies.length) return;
    }
  }

  /**
   * The bodies of the next request: at most batchSize records and MAX_BATCH_BYTES. A leading record
   * that cannot be serialized is reported and dropped here (the server could never record it).
   */
  private nextBatch(): string[] {
    const bodies: string[] = [];
    let bytes = 2;
    while (bodies.length < this.size && bodies.length < this.batchSize) {
      const body = this.body(bodies.length);
      if (typeof body !== 'string') {
        if (bodies.length > 0) break; // send what precedes it first, in order
        this.report(body);
        this.shift(1);
        continue;
      }
      bytes += utf8Length(body) + 1;
      if (bodies.length > 0 && bytes > MAX_BATCH_BYTES) break;
      bodies.push(body);
    }
    return bodies;
  }

  /**
   * Sends until recorded; answers how many leading bodies are done with (all, unless close() gave
   * up). Bodies the server refuses as invalid are reported and count as done.
   */
  private async send(bodies: string[]): Promise<number> {
    const payload = `[${bodies.join(',')}]`;
    // One Idempotency-Key per batch, sent again with every retry of it: when an answer is lost after
    // the server recorded the batch (a reset connection, a timeout), the retry gets that answer
    // replayed and nothing is recorded twice. Parts of a split batch are new batches, with new keys.
    const key = { 'idempotency-key': newIdempotencyKey() };
    // Backoff steps, and the close() or exit they count from (hurry starts them over).
    let step = 0;
    let hurried = this.hurried;
    for (;;) {
      if (this.giveUp.signal.aborted) return 0;
      const attemptHurried = this.hurried;
      let headers: Headers | null = null;
      try {
        const res = await this.http.request('POST', '/v1/decisions', payload, undefined, key);
        // Recorded now, or earlier (a replay of the first answer: header idempotent-replayed: true).
        if (res.status === 201) {
          this.exitGaveUp = false;
          return bodies.length;
        }
        headers = res.headers;
        // No route of the service answers this: the base URL or a proxy sends the log elsewhere,
        // where nothing can ever be recorded.
        if (res.status === 404) {
          this.refuse(notTheService('POST', this.http.url('/v1/decisions'), res));
          return 0;
        }
        const err = apiError(res);
        // Only the service's own refusal (its error envelope) says something of the batch: a 400 or
        // 413 page from a proxy or load balancer is an answer from elsewhere, kept and retried below.
        // A proxy's 413 says the body is too large for it: halves go through it, and a single
        // decision it still refuses is kept and retried, never dropped.
        if (res.status === 413 && !fromService(res) && bodies.length > 1) return this.split(bodies, err);
        if ((res.status === 400 || res.status === 413) && fromService(res)) {
          if (res.status === 413) return this.split(bodies, err);
          // The request itself is refused: no decision of this key can be recorded, whatever the batch.
          if (err.code === MISSING_PROJECT) {
            this.refuse(err);
            return 0;
          }
          const at = err.code === INVALID_ITEM ? itemNamed(err, bodies.length) : null;
          // Any other 400 (a body it cannot record without naming the decision, or one it cannot
          // read: arguments changed after the call, under snapshot: false) is halved to find it.
          return at === null ? this.split(bodies, err) : this.reject(bodies, at, err);
        }
        // 429/5xx: wait and retry; 409 idempotency_request_in_progress: an earlier attempt still runs
        // on the server, ask again with the same key; 401/403 (a revoked key), a 400/413 without the
        // service's envelope and any other refusal: keep the decisions, report, retry slowly.
        if (!isRetryable(res.status) && err.code !== IN_PROGRESS) this.report(err);
      } catch (err) {
        this.report(err);
      }
      const after = retryAfter(headers);
      // close() or the exit started since the last wait: the backoff starts over, from short waits;
      // if it started while this attempt ran, the next one is made at once (as a wait under way is
      // cut short), unless the server asked for a wait that ends in time.
      if (hurried !== this.hurried) {
        hurried = this.hurried;
        step = 0;
        if (attemptHurried !== hurried && !this.keepsWait(after, performance.now())) continue;
      }
      await this.backoff(retryDelay(step++, headers, MAX_BACKOFF_MS), after !== null);
    }
  }

  /** A server's Retry-After (`after`, from `now`) is waited for in full while it ends by the deadline. */
  private keepsWait(after: number | null, now: number): boolean {
    return after !== null && this.deadline !== null && now + after <= this.deadline;
  }

  /**
   * Waits `ms` before the next attempt, in the background: it does not keep a finished process alive
   * (the flush at exit does, boundedly). Never past the deadline of close() or the exit; cut short
   * when one starts (hurry), unless the wait is a server's Retry-After that ends in time.
   */
  private async backoff(ms: number, fromServer: boolean): Promise<void> {
    if (this.giveUp.signal.aborted) return;
    const now = performance.now();
    const wait = this.deadline === null ? ms : Math.min(ms, Math.max(0, this.deadline - now));
    const wake = new AbortController();
    const giveUp = () => wake.abort();
    this.giveUp.signal.addEventListener('abort', giveUp, { once: true });
    this.nap = { until: now + wait, fromServer, wake };
    try {
      await sleep(wait, wake.signal, true);
    } finally {
      this.nap = null;
      this.giveUp.signal.removeEventListener('abort', giveUp);
    }
  }

  /** The service refused the log as a whole: reported once; nothing more is sent. */
  private refuse(err: ApiError): void {
    if (this.refusal !== null) return;
    this.refusal = err;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.report(err);
    this.wake();
  }

  /**
   * The server named the decision at `at` as the one it refuses (a batch is recorded all or nothing,
   * and checked in order): the ones before it are sent on their own, it is reported and dropped.
   */
  private async reject(bodies: string[], at: number, err: ApiError): Promise<number> {
    const before = at > 0 ? await this.send(bodies.slice(0, at)) : 0;
    if (before < at) return before;
    this.report(new LogRejectedError(bodies[at]!, err));
    return at + 1;
  }

  /** A batch is recorded all or nothing: find the body the server refuses, unnamed, by halving. */
  private async split(bodies: string[], err: ApiError): Promise<number> {
    if (bodies.length === 1) {
      this.report(new LogRejectedError(bodies[0]!, err));
      return 1;
    }
    const half = Math.ceil(bodies.length / 2);
    const first = await this.send(bodies.slice(0, half));
    return first < half ? first : first + (await this.send(bodies.slice(half)));
  }
}

/** POST /v1/decisions refuses a key without a project, whatever the body (400). */
const MISSING_PROJECT = 'missing_project';

/** Why no decision of the log can be recorded, for FlushError. */
const refused = (err: ApiError): string =>
  err.code === MISSING_PROJECT
    ? `the service refuses this API key's decisions (${err.message})`
    : err.message;
/** A decision of the batch is invalid; the message names it first: `body/<index>/<field> ...`. */
const INVALID_ITEM = 'validation_failed';

/** The index of the batch's decision an error names (`body/3/arguments/x ...`), or null. */
function itemNamed(err: ApiError, count: number): number | null {
  // ApiError's message is `<status> <code>: <the server's message>`.
  const m = /^body\/(\d+)(?=[/ ]|$)/.exec(err.message.slice(`${err.status} ${err.code}: `.length));
  if (m === null) return null;
  const at = Number(m[1]);
  return at < count ? at : null;
}

/** The answer to a retry whose first attempt has not answered yet (same Idempotency-Key). */
const IN_PROGRESS = 'idempotency_request_in_progress';

/**
 * A random (version 4) UUID for a batch's Idempotency-Key. `crypto.randomUUID` exists in every
 * runtime but browser pages served over plain HTTP; there it is made from `crypto.getRandomValues`.
 */
export function newIdempotencyKey(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === 'function') return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** An arguments or context slot held as `argN`/`ctxN` key/value pairs of the chunk's slab. */
const FLAT = Symbol('flat');
const MAX_FLAT_KEYS = 255;

/**
 * Appends the keys and values of a plain object whose values are all primitives JSON writes as
 * they are (string, number, boolean, null, undefined) to the slab, and answers how many; -1, with
 * the slab as it was, for anything else. Keys come in the order JSON.stringify writes them.
 */
function hold(slab: unknown[], value: object): number {
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return -1;
  const start = slab.length;
  let n = 0;
  for (const k in value) {
    // for...in also lists enumerable properties added to Object.prototype; JSON does not.
    if (!Object.hasOwn(value, k)) continue;
    const v = (value as Record<string, unknown>)[k];
    const t = typeof v;
    if ((t !== 'string' && t !== 'number' && t !== 'boolean' && v != null) || ++n > MAX_FLAT_KEYS) {
      slab.length = start;
      return -1;
    }
    slab.push(k, v);
  }
  return n;
}

const isHighSurrogate = (c: number) => c >= 0xd800 && c <= 0xdbff;
const toWellFormed = (s: string): string => (s as unknown as { toWellFormed(): string }).toWellFormed();

/**
 * A reason as the log may send it: at most MAX_REASON UTF-16 units, cut between two characters
 * (never inside a surrogate pair), and well-formed (a lone surrogate, which a reason quoting a cut
 * value can hold, as U+FFFD): the server refuses a body that is not well-formed Unicode.
 */
function loggedReason(reason: string): string {
  let r = reason;
  if (r.length > MAX_REASON)
    r = r.slice(0, isHighSurrogate(r.charCodeAt(MAX_REASON - 1)) ? MAX_REASON - 1 : MAX_REASON);
  return toWellFormed(r);
}

/** The object held by hold() (its own keys even when one is "__proto__"). */
function unfold(slab: unknown[], at: number, n: number): Record<string, unknown> {
  const o: Record<string, unknown> = Object.create(null);
  for (let j = at, end = at + 2 * n; j < end; j += 2) o[slab[j] as string] = slab[j + 1];
  return o;
}

/** JSON text of what the caller passed (a string is JSON text already: the snapshot). */
function json(value: unknown): string {
  if (typeof value === 'string') return value;
  const out = JSON.stringify(value);
  if (out === undefined) throw new Error('not a JSON value');
  return out;
}

const CHUNK_BITS = 10;
const CHUNK = 1 << CHUNK_BITS;
const CHUNK_MASK = CHUNK - 1;

/** CHUNK records as parallel arrays (packed: filled once, then overwritten in place). */
class Chunk {
  readonly tools: unknown[] = new Array(CHUNK).fill(undefined);
  readonly args: unknown[] = new Array(CHUNK).fill(undefined);
  readonly contexts: unknown[] = new Array(CHUNK).fill(undefined);
  readonly reasons: unknown[] = new Array(CHUNK).fill(undefined);
  readonly decisions = new Uint8Array(CHUNK);
  readonly latencies = new Float64Array(CHUNK);
  /** Keys and values of the flat objects held (FLAT slots): where in `slab` and how many pairs. */
  readonly slab: unknown[] = [];
  readonly argAt = new Uint32Array(CHUNK);
  readonly argN = new Uint8Array(CHUNK);
  readonly ctxAt = new Uint32Array(CHUNK);
  readonly ctxN = new Uint8Array(CHUNK);
}
