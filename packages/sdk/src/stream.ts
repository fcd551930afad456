import { type Http, retryDelay, sleep } from './http.js';

export interface StreamHandlers {
  /** The server acknowledged the stream (`:ok`): events flow from now on. */
  onConnect(): void;
  onDisconnect(): void;
  onEvent(type: string, data: unknown): void;
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

/** The server pings every 15 s; this long without a byte means the connection is dead. */
const SILENCE_MS = 45_000;

/**
 * The organization's event stream over SSE, read with fetch streaming (any runtime), reconnecting
 * with backoff until stopped.
 */
export class EventStream {
  private readonly abort = new AbortController();
  private done: Promise<void> | null = null;

  constructor(
    private readonly http: Http,
    private readonly handlers: StreamHandlers,
  ) {}

  start(): void {
    this.done ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.done;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.abort.signal.aborted) {
      let connected = false;
      try {
        connected = await this.connectOnce(() => {
          connected = true;
          failures = 0;
        });
      } catch (err) {
        if (!this.abort.signal.aborted) this.handlers.onError(err as Error);
      } finally {
        if (connected) this.handlers.onDisconnect();
      }
      if (this.abort.signal.aborted) break;
      await sleep(retryDelay(failures++, null, 30_000), this.abort.signal);
    }
  }

  /** One connection, until it ends; true when it got as far as `:ok`. */
  private async connectOnce(onOk: () => void): Promise<boolean> {
    const attempt = new AbortController();
    const stopAttempt = () => attempt.abort();
    this.abort.signal.addEventListener('abort', stopAttempt, { once: true });
    let watchdog: ReturnType<typeof setTimeout> | undefined;
    const feed = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(stopAttempt, SILENCE_MS);
    };
    let ok = false;
    try {
      feed();
      const res = await this.http.fetch(this.http.url(`/v1/events/stream?types=${TYPES}`), {
        headers: { 'x-service-api-key': this.http.apiKey, accept: 'text/event-stream' },
        signal: attempt.signal,
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
      this.abort.signal.removeEventListener('abort', stopAttempt);
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
