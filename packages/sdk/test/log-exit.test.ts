import { describe, expect, it } from 'vitest';
import { FlushError } from '../src/errors.js';
import type { Http, HttpResponse } from '../src/http.js';
import { ALLOW, DecisionLog } from '../src/log.js';

/** A service that answers the decision log 503 while `down`, else records each batch and answers 201. */
function service() {
  const s = {
    down: true,
    recorded: [] as number[],
    http: {
      async request(_method: string, _path: string, body?: string): Promise<HttpResponse> {
        if (s.down) {
          return {
            status: 503,
            headers: new Headers({ 'retry-after': '0' }),
            body: { error: { code: 'service_unavailable', message: 'down' } },
          };
        }
        for (const d of JSON.parse(body!) as { arguments: { n: number } }[]) s.recorded.push(d.arguments.n);
        return { status: 201, headers: new Headers(), body: { success: true } };
      },
    } as unknown as Http,
  };
  return s;
}

function logOf(http: Http, errors: Error[]) {
  return new DecisionLog(http, {
    batchSize: 500,
    flushIntervalMs: 60_000,
    maxBuffered: 1000,
    exitTimeoutMs: 100,
    onError: (e) => errors.push(e),
  });
}

const decide = (log: DecisionLog, n: number) =>
  log.add('pay', { n }, undefined, ALLOW, 'ok', undefined, 1, true);
const flushErrors = (errors: Error[]) => errors.filter((e): e is FlushError => e instanceof FlushError);

describe('the flush when the process is about to exit', () => {
  it('reports what it could not send, and still sends it, and what comes later, should the process go on', async () => {
    const svc = service();
    const errors: Error[] = [];
    const log = logOf(svc.http, errors);
    decide(log, 1);
    await log.flushAtExit(100);
    expect(flushErrors(errors).map((e) => [e.pending.length, e.kept])).toEqual([[1, true]]);
    expect(log.givenUp).toBe(false);

    // Exiting again at once, with nothing new: neither waits nor reports the same decisions again.
    const started = performance.now();
    await log.flushAtExit(5000);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(flushErrors(errors)).toHaveLength(1);

    // The process went on (more work was scheduled): a new decision, and the service is back.
    decide(log, 2);
    await log.flushAtExit(5000);
    expect(flushErrors(errors).map((e) => e.pending.length)).toEqual([1, 2]);
    svc.down = false;
    await log.flush();
    expect(svc.recorded).toEqual([1, 2]);
    expect(log.pending).toBe(0);
  });

  it('waits again at the next exit once something was recorded since', async () => {
    const svc = service();
    const errors: Error[] = [];
    const log = logOf(svc.http, errors);
    decide(log, 1);
    await log.flushAtExit(100);
    svc.down = false;
    await log.flush();
    decide(log, 2);
    await log.flushAtExit(5000);
    expect(svc.recorded).toEqual([1, 2]);
    expect(flushErrors(errors)).toHaveLength(1);
  });
});

describe('close() and the exit flush after a long outage', () => {
  /**
   * A service the log cannot reach until `up`: its first `quick` answers are 503 with Retry-After: 0
   * (the backoff grows without any wait), then requests fail as a network does (no Retry-After), so
   * the log sleeps the longest backoff, 30-60 s; `asleep` resolves at that failure.
   */
  function longOutage(quick = 10) {
    let fellAsleep!: () => void;
    const s = {
      up: false,
      posts: 0,
      recorded: [] as number[],
      asleep: new Promise<void>((resolve) => {
        fellAsleep = resolve;
      }),
      http: {
        async request(_method: string, _path: string, body?: string): Promise<HttpResponse> {
          s.posts++;
          if (s.up) {
            for (const d of JSON.parse(body!) as { arguments: { n: number } }[])
              s.recorded.push(d.arguments.n);
            return { status: 201, headers: new Headers(), body: { success: true } };
          }
          if (s.posts <= quick) {
            return {
              status: 503,
              headers: new Headers({ 'retry-after': '0' }),
              body: { error: { code: 'service_unavailable', message: 'down' } },
            };
          }
          fellAsleep();
          throw new TypeError('fetch failed');
        },
      } as unknown as Http,
    };
    return s;
  }

  it('close() retries at once, not after the backoff under way, once the service is back', async () => {
    const svc = longOutage();
    const log = logOf(svc.http, []);
    decide(log, 1);
    void log.flush();
    await svc.asleep;
    svc.up = true;
    await log.close(5000);
    expect(svc.recorded).toEqual([1]);
  });

  it('the exit flush does too', async () => {
    const svc = longOutage();
    const errors: Error[] = [];
    const log = logOf(svc.http, errors);
    decide(log, 1);
    void log.flush();
    await svc.asleep;
    svc.up = true;
    await log.flushAtExit(5000);
    expect(svc.recorded).toEqual([1]);
    expect(flushErrors(errors)).toEqual([]);
  });

  it('keeps retrying until the deadline while the service stays down, no wait passing it', async () => {
    const svc = longOutage();
    const log = logOf(svc.http, []);
    decide(log, 1);
    void log.flush();
    await svc.asleep;
    const before = svc.posts;
    const started = performance.now();
    const closing = await log.close(1500).catch((e: unknown) => e);
    expect(closing).toBeInstanceOf(FlushError);
    expect(performance.now() - started).toBeLessThan(3000);
    // At once, then again within the backoff's first steps (at most 250 ms, then 500 ms): by 750 ms.
    expect(svc.posts - before).toBeGreaterThanOrEqual(3);
  });

  it('still waits for a Retry-After that ends before the deadline', async () => {
    const posts: number[] = [];
    let limited!: () => void;
    const firstAnswer = new Promise<void>((resolve) => {
      limited = resolve;
    });
    const http = {
      async request(): Promise<HttpResponse> {
        posts.push(performance.now());
        if (posts.length === 1) {
          limited();
          return {
            status: 429,
            headers: new Headers({ 'retry-after': '1' }),
            body: { error: { code: 'rate_limit_exceeded', message: 'slow down' } },
          };
        }
        return { status: 201, headers: new Headers(), body: { success: true } };
      },
    } as unknown as Http;
    const log = logOf(http, []);
    decide(log, 1);
    void log.flush();
    // close() starts while the 429 is on its way or once the log waits for its second: either way,
    // the Retry-After ends well before the deadline and is waited for.
    await firstAnswer;
    await log.close(5000);
    expect(posts).toHaveLength(2);
    expect(posts[1]! - posts[0]!).toBeGreaterThanOrEqual(950);
  });
});

describe('a log the service refuses as a whole (a key without a project)', () => {
  it('sends one request, then hands the decisions back at exit instead of dropping them', async () => {
    let posts = 0;
    const http = {
      async request(): Promise<HttpResponse> {
        posts++;
        return {
          status: 400,
          headers: new Headers(),
          body: { error: { code: 'missing_project', message: 'This API key is not scoped to a project' } },
        };
      },
    } as unknown as Http;
    const errors: Error[] = [];
    const log = logOf(http, errors);
    decide(log, 1);
    decide(log, 2);
    await expect(log.flush()).rejects.toMatchObject({ status: 400, code: 'missing_project' });
    expect(posts).toBe(1);
    expect(errors).toHaveLength(1);
    expect(log.pending).toBe(2);
    await log.flushAtExit(5000);
    const handedBack = flushErrors(errors);
    expect(handedBack.map((e) => [e.pending.map((b) => JSON.parse(b).arguments.n), e.kept])).toEqual([
      [[1, 2], false],
    ]);
    expect(log.pending).toBe(0);
    await log.close(5000);
    expect(posts).toBe(1);
  });
});
