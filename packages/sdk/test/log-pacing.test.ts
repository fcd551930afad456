import { createClient } from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../server/test/helpers.js';
import type { Http, HttpResponse } from '../src/http.js';
import { ALLOW, DecisionLog } from '../src/log.js';
import { createTenant, putPolicy, startServer } from './live.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A service that records each batch after `latencyMs` and answers 201; `starts` are the request times. */
function service(latencyMs: number) {
  const s = {
    starts: [] as number[],
    sizes: [] as number[],
    recorded: [] as number[],
    http: {
      async request(_method: string, _path: string, body?: string): Promise<HttpResponse> {
        s.starts.push(performance.now());
        const batch = JSON.parse(body!) as { arguments: { n: number } }[];
        s.sizes.push(batch.length);
        await sleep(latencyMs);
        for (const d of batch) s.recorded.push(d.arguments.n);
        return { status: 201, headers: new Headers(), body: { success: true } };
      },
    } as unknown as Http,
  };
  return s;
}

const logOf = (http: Http, flushIntervalMs: number, batchSize = 500) =>
  new DecisionLog(http, {
    batchSize,
    flushIntervalMs,
    maxBuffered: 100_000,
    exitTimeoutMs: 100,
    onError: () => {},
  });

const decide = (log: DecisionLog, n: number) =>
  log.add('pay', { n }, undefined, ALLOW, 'ok', undefined, 1, true);

describe('the decision log’s pace', () => {
  it('sends a steady trickle once per flushIntervalMs, not one request per round trip', async () => {
    // Decisions come faster than the service answers: some always wait when a request ends.
    const svc = service(20);
    const log = logOf(svc.http, 200);
    const started = performance.now();
    let n = 0;
    while (performance.now() - started < 1200) {
      decide(log, n++);
      await sleep(5);
    }
    // About 1200 / 200 requests (each after the flush timer); back to back it would be hundreds.
    expect(svc.starts.length).toBeGreaterThanOrEqual(3);
    expect(svc.starts.length).toBeLessThanOrEqual(7);
    for (let i = 1; i < svc.starts.length; i++) {
      expect(svc.starts[i]! - svc.starts[i - 1]!).toBeGreaterThanOrEqual(190);
    }
    await log.flush();
    expect(svc.recorded).toEqual([...Array(n).keys()]);
  });

  it('sends full batches at once, and what is left at the flush timer', async () => {
    const svc = service(2);
    const log = logOf(svc.http, 300, 100);
    for (let n = 0; n < 250; n++) decide(log, n);
    await sleep(100);
    expect(svc.sizes).toEqual([100, 100]);
    await sleep(400);
    expect(svc.sizes).toEqual([100, 100, 50]);
    expect(svc.recorded).toHaveLength(250);
  });
});

describe('flush()', () => {
  it('resolves once the decisions taken before it are recorded, whatever is taken after', async () => {
    const svc = service(30);
    const log = logOf(svc.http, 60_000);
    let n = 0;
    let running = true;
    const traffic = (async () => {
      while (running) {
        decide(log, n++);
        await sleep(5);
      }
    })();
    await sleep(50);
    const before = n;
    const flushed = await Promise.race([log.flush().then(() => true), sleep(1500).then(() => false)]);
    const whileRunning = running;
    running = false;
    await traffic;
    expect(flushed).toBe(true);
    expect(whileRunning).toBe(true);
    expect(svc.recorded.slice(0, before)).toEqual([...Array(before).keys()]);
    await log.close(1000);
  });

  it('resolves too while full batches keep the log sending without a pause', async () => {
    const svc = service(10);
    const log = logOf(svc.http, 60_000, 10);
    let n = 0;
    let running = true;
    const traffic = (async () => {
      while (running) {
        for (let i = 0; i < 20; i++) decide(log, n++);
        await sleep(5);
      }
    })();
    await sleep(50);
    const before = n;
    const flushed = await Promise.race([log.flush().then(() => true), sleep(1500).then(() => false)]);
    const whileRunning = running;
    running = false;
    await traffic;
    expect(flushed).toBe(true);
    expect(whileRunning).toBe(true);
    expect(svc.recorded.slice(0, before)).toEqual([...Array(before).keys()]);
    await log.close(5000);
  });
});

describe('a client under steady traffic', () => {
  let t: TestApp;
  let baseUrl: string;
  beforeAll(async () => {
    ({ t, baseUrl } = await startServer());
  });
  afterAll(async () => t.close());

  it('stays far below the log’s 120 requests per minute, and close() then records everything', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 100 }],
    });
    const statuses: number[] = [];
    let recorded = 0;
    let counting = false;
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl,
      live: false,
      log: { flushIntervalMs: 250 },
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
          if (counting) statuses.push(res.status);
          if (res.status === 201) recorded += JSON.parse(String(init.body)).length;
        }
        return res;
      },
    });
    // The service's first record is slower (it warms up): measured from the next one.
    await client.validate('pay', { amount: 1 });
    await client.flush();
    counting = true;
    const started = performance.now();
    let calls = 1;
    while (performance.now() - started < 2500) {
      expect((await client.validate('pay', { amount: 2 })).source).toBe('local');
      calls++;
      await sleep(5);
    }
    // At most one request per flushIntervalMs (plus the one under way): ~10, not one per round trip.
    expect(statuses.length).toBeLessThanOrEqual(12);
    expect(statuses.every((s) => s === 201)).toBe(true);
    await client.close();
    expect(calls).toBeGreaterThan(100);
    expect(recorded).toBe(calls);
  });
});
