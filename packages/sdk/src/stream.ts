import { type Http, retryDelay, sleep, unref } from './http.js';

/** What the stream tells its owner. They must not throw (the client guards the user's callbacks). */
export interface StreamHandlers {
  /** The server acknowledged the stream (`:ok`): events flow from now on. */
  onConnect(): void;
  onDisconnect(): void;
  onEvent(type: string, data: unknown): void;
  /** Bytes arrived (an event, or the server's heartbeat): the stream was alive just now. */
  onBytes(): void;
  onError(error: Error): void;
}

const TYPES = [
  'policy.created',
  'policy.updated',
  'policy.activated',
  'policy.deactivated',
  'policy.deleted',
  'approval.resolved',
  'approval.expired',
].join(',');

/**
 * The server writes a `:ping` every 15 s (packages/server/src/events/options.ts): this long without a
 * byte means the connection is dead, and it is opened again. Freshness does not wait for this: the
 * policy cache counts from the last byte received (PolicyCache.heard).
 */
const SILENCE_MS = 45_000;

/**
 * The organization's event stream over SSE, read with fetch streaming (any runtime), reconnecting
 * with backoff until stopped. It can be started again after a stop.
 */
export class EventStream {
  private abort: AbortController | null = null;
  private done: Promise<void> = Promise.resolve();

  constructor(
    private readonly http: Http,
    private readonly handlers: StreamHandlers,
  ) {}

  get running(): boolean {
    return this.abort !== null;
  }

  start(): void {
    if (this.abort) return;
    const abort = new AbortController();
    this.abort = abort;
    const previous = this.done;
    // A run stopped just before ends (and says so) before the next one connects.
    this.done = previous
      .then(() => this.run(abort.signal))
      .catch((err: unknown) => this.handlers.onError(err as Error));
  }

  async stop(): Promise<void> {
    this.abort?.abort();
    this.abort = null;
    await this.done;
  }

  private async run(signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      let connected = false;
      try {
        connected = await this.connectOnce(signal, () => {
          connected = true;
          failures = 0;
        });
      } catch (err) {
        if (!signal.aborted) this.handlers.onError(err as Error);
      } finally {
        if (connected) this.handlers.onDisconnect();
      }
      if (signal.aborted) break;
      // In the background: a service that stays down does not keep a finished process alive.
      await sleep(retryDelay(failures++, null, 30_000), signal, true);
    }
  }

  /** One connection, until it ends; true when it got as far as `:ok`. */
  private async connectOnce(signal: AbortSignal, onOk: () => void): Promise<boolean> {
    const attempt = new AbortController();
    const stopAttempt = () => attempt.abort();
    signal.addEventListener('abort', stopAttempt, { once: true });
    let watchdog: ReturnType<typeof setTimeout> | undefined;
    const feed = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(stopAttempt, SILENCE_MS);
      unref(watchdog);
    };
    let ok = false;
    try {
      feed();
      const res = await this.http.fetch(this.http.url(`/v1/events/stream?types=${TYPES}`), {
        headers: { 'x-service-api-key': this.http.apiKey, accept: 'text/event-stream' },
        signal: attempt.signal,
        // As for every request: a redirect is not followed with the API key.
        redirect: 'manual',
      });
      if (res.status !== 200 || !res.body) {
        await res.body?.cancel();
        throw new Error(`event stream answered HTTP ${res.status}`);
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let event = 'message';
      let data: string[] = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed();
        this.handlers.onBytes();
        buffer += value;
        let nl = buffer.indexOf('\n');
        while (nl >= 0) {
          const line = buffer.slice(0, nl).replace(/\r$/, '');
          buffer = buffer.slice(nl + 1);
          nl = buffer.indexOf('\n');
          if (line === '') {
            if (data.length > 0) this.dispatch(event, data.join('\n'));
            event = 'message';
            data = [];
          } else if (line.startsWith(':')) {
            if (line === ':ok' && !ok) {
              ok = true;
              onOk();
              this.handlers.onConnect();
            }
          } else {
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            const raw = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
            if (field === 'event') event = raw;
            else if (field === 'data') data.push(raw);
          }
        }
      }
      return ok;
    } finally {
      clearTimeout(watchdog);
      signal.removeEventListener('abort', stopAttempt);
    }
  }

  private dispatch(type: string, raw: string): void {
    let data: unknown;
    try {
      data = JSON.parse(raw);
    } catch {
      return;
    }
    this.handlers.onEvent(type, data);
  }
}
