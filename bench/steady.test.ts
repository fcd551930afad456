import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { steadyLoad } from './steady.js';

let server: Server | null = null;

afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

/** A server that holds its first `slow` answers for `delayMs`, then answers at once. */
async function serve(slow: number, delayMs: number): Promise<string> {
  let seen = 0;
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const answer = () => res.writeHead(200, { 'content-length': '2' }).end('{}');
      if (seen++ < slow) setTimeout(answer, delayMs);
      else answer();
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server!.address() as AddressInfo).port}/`;
}

describe('steadyLoad', () => {
  it('reports the warm-up window apart from the measured one, and counts both as answered', async () => {
    // 100 requests/s: 50 in the warm-up, each held 400 ms (at most 40 in flight, fewer than the
    // 64 connections, so nothing measured queues behind them), then 50 measured.
    const url = await serve(50, 400);
    const r = await steadyLoad({ url, rate: 100, warmupS: 0.5, durationS: 0.5, bodies: ['{}'] });
    expect(r.sent).toBe(100);
    expect(r.ok).toBe(100);
    expect(r.errors).toBe(0);
    expect(r.warmup).toEqual({ answered: 50, p99: expect.any(Number) });
    expect(r.warmup!.p99).toBeGreaterThanOrEqual(400);
    expect(r.p99).toBeLessThan(400);
  });

  it('measures every request when there is no warm-up', async () => {
    const url = await serve(5, 300);
    const r = await steadyLoad({ url, rate: 100, durationS: 0.5, bodies: ['{}'] });
    expect(r.ok).toBe(50);
    expect(r.warmup).toBeUndefined();
    expect(r.max).toBeGreaterThanOrEqual(300);
  });
});
