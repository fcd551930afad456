import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { steadyLoad } from './steady.js';

let server: Server | null = null;

afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

/** A server that holds the answer to a body `{"i":k}` for `delayMs` when k < `slow`. */
async function serve(slow: number, delayMs: number): Promise<string> {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const { i } = JSON.parse(Buffer.concat(chunks).toString()) as { i: number };
      const answer = () => res.writeHead(200, { 'content-length': '2' }).end('{}');
      if (i < slow) setTimeout(answer, delayMs);
      else answer();
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server!.address() as AddressInfo).port}/`;
}

/** Request k carries body k (the generator cycles through its bodies in order). */
const bodies = (n: number) => Array.from({ length: n }, (_, i) => JSON.stringify({ i }));

describe('steadyLoad', () => {
  it('reports the warm-up window apart from the measured one, and counts both as answered', async () => {
    // 100 requests/s: the 50 of the warm-up are each held 400 ms (at most 40 in flight, fewer than
    // the 64 connections, so nothing measured queues behind them), then 50 are measured.
    const url = await serve(50, 400);
    const r = await steadyLoad({
      url,
      rate: 100,
      warmupS: 0.5,
      durationS: 0.5,
      bodies: bodies(100),
      record: true,
    });
    expect(r.sent).toBe(100);
    expect(r.ok).toBe(100);
    expect(r.errors).toBe(0);
    expect(r.warmup).toEqual({ answered: 50, p99: expect.any(Number) });
    expect(r.warmup!.p99).toBeGreaterThanOrEqual(400);
    expect(r.p99).toBeLessThan(400);
    // Due times are computed (10 ms apart), counted from the measured window's start.
    const due = [...r.trace!.due].sort((a, b) => a - b);
    expect(due).toHaveLength(50);
    expect(due[0]).toBeCloseTo(0, 6);
    expect(due[49]).toBeCloseTo(490, 6);
  });

  it('measures every request when there is no warm-up', async () => {
    const url = await serve(5, 300);
    const r = await steadyLoad({ url, rate: 100, durationS: 0.5, bodies: bodies(50) });
    expect(r.ok).toBe(50);
    expect(r.warmup).toBeUndefined();
    expect(r.max).toBeGreaterThanOrEqual(300);
  });

  it('refuses a negative warm-up', async () => {
    await expect(
      steadyLoad({ url: 'http://127.0.0.1:9/', rate: 1, warmupS: -1, durationS: 1, bodies: ['{}'] }),
    ).rejects.toThrow(/warmupS/);
  });
});
