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
