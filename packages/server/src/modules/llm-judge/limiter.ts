/** Thrown when the wait queue is full: more calls are waiting than the provider could answer in time. */
export class QueueFullError extends Error {}

/**
 * A counting semaphore with a bounded FIFO queue. Waiting is asynchronous (a promise), so a judgement
 * waiting for a slot never blocks the event loop; a waiter whose signal aborts leaves the queue.
 */
export class ConcurrencyLimiter {
  private active = 0;
  private readonly waiting: { grant: () => void }[] = [];

  constructor(
    private readonly max: number,
    private readonly maxWaiting: number,
  ) {}

  async run<T>(signal: AbortSignal, task: () => Promise<T>): Promise<T> {
    await this.acquire(signal);
    try {
      return await task();
    } finally {
      this.release();
    }
  }

  private acquire(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.active < this.max) {
      this.active++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.maxWaiting) return Promise.reject(new QueueFullError('queue full'));
    return new Promise((resolve, reject) => {
      const entry = {
        grant: () => {
          signal.removeEventListener('abort', onAbort);
          this.active++;
          resolve();
        },
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(entry);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  private release(): void {
    this.active--;
    this.waiting.shift()?.grant();
  }
}
