import { type ApiError, FlushError, LogRejectedError } from './errors.js';
import { apiError, type Http, isRetryable, retryDelay, sleep } from './http.js';

/** The server's batch bound (POST /v1/decisions) and a body size well under its 1 MiB limit. */
export const MAX_BATCH = 500;
const MAX_BATCH_BYTES = 900_000;
const MAX_BACKOFF_MS = 60_000;

export interface DecisionLogOptions {
  batchSize: number;
  flushIntervalMs: number;
  onError: (error: Error) => void;
}

/**
 * Local decisions on their way to POST /v1/decisions: queued as ready-made JSON bodies, sent in
 * batches (each one request against the rate limit), in order, one request at a time, retried with
 * backoff (honouring Retry-After) until the server has recorded them.
 */
export class DecisionLog {
  private queue: string[] = [];
  private sending: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Aborts the backoff sleep when close() runs out of time. */
  private readonly giveUp = new AbortController();
  private readonly batchSize: number;

  constructor(
    private readonly http: Http,
    private readonly options: DecisionLogOptions,
  ) {
    this.batchSize = Math.max(1, Math.min(MAX_BATCH, options.batchSize));
  }

  /** `body` is one POST /v1/decisions object, serialized when the decision was taken. */
  add(body: string): void {
    this.queue.push(body);
    if (this.queue.length >= this.batchSize) this.kick();
    else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.kick(), this.options.flushIntervalMs);
      // Node: a pending flush must not keep the process alive by itself; close() flushes.
      (this.timer as { unref?: () => void }).unref?.();
    }
  }

  get pending(): number {
    return this.queue.length;
  }

  private kick(): void {
    if (this.giveUp.signal.aborted) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.sending ??= this.drain().finally(() => {
      this.sending = null;
      if (this.queue.length > 0 && !this.giveUp.signal.aborted) this.kick();
    });
  }

  /** Resolves once every decision queued before the call is recorded (or refused as invalid). */
  async flush(): Promise<void> {
    while (this.queue.length > 0 || this.sending) {
      this.kick();
      await this.sending;
      if (this.giveUp.signal.aborted) return;
    }
  }

  /** Flushes within `timeoutMs`, else throws FlushError carrying the decisions not recorded. */
  async close(timeoutMs: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
    });
    const outcome = await Promise.race([this.flush().then(() => 'done' as const), timedOut]);
    clearTimeout(timer);
    if (outcome === 'done' && this.queue.length === 0) return;
    this.giveUp.abort();
    await this.sending;
    throw new FlushError(
      `${this.queue.length} local decision(s) could not be recorded within ${timeoutMs} ms`,
      [...this.queue],
    );
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0 && !this.giveUp.signal.aborted) {
      const count = this.batchCount();
      const handled = await this.send(this.queue.slice(0, count));
      this.queue.splice(0, handled);
      if (handled < count) return;
    }
  }

  /** How many queued bodies go in the next request: at most batchSize and MAX_BATCH_BYTES. */
  private batchCount(): number {
    let bytes = 2;
    let n = 0;
    while (n < this.queue.length && n < this.batchSize) {
      bytes += this.queue[n]!.length + 1;
      if (n > 0 && bytes > MAX_BATCH_BYTES) break;
      n++;
    }
    return n;
  }

  /**
   * Sends until recorded; answers how many leading bodies are done with (all, unless close() gave
   * up). Bodies the server refuses as invalid are reported and count as done.
   */
  private async send(bodies: string[]): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      if (this.giveUp.signal.aborted) return 0;
      let headers: Headers | null = null;
      try {
        const res = await this.http.request('POST', '/v1/decisions', `[${bodies.join(',')}]`);
        if (res.status === 201) return bodies.length;
        headers = res.headers;
        const err = apiError(res);
        if (res.status === 400 || res.status === 413) return this.split(bodies, err);
        // 429/5xx: wait and retry; 401/403 (a revoked key): keep the decisions, report, retry slowly.
        if (!isRetryable(res.status)) this.options.onError(err);
      } catch (err) {
        this.options.onError(err as Error);
      }
      await sleep(retryDelay(attempt, headers, MAX_BACKOFF_MS), this.giveUp.signal);
    }
  }

  /** A batch is recorded all or nothing: find the bodies the server refuses by halving. */
  private async split(bodies: string[], err: ApiError): Promise<number> {
    if (bodies.length === 1) {
      this.options.onError(new LogRejectedError(bodies[0]!, err));
      return 1;
    }
    const half = Math.ceil(bodies.length / 2);
    const first = await this.send(bodies.slice(0, half));
    return first < half ? first : first + (await this.send(bodies.slice(half)));
  }
}
