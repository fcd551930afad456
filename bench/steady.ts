/**
 * Open-loop load at a steady rate: request i is due at start + i / rate, whatever happened to the
 * ones before it, and its latency is measured from that due time (so a stall of the server, or of
 * this generator, counts against every request it delays: no coordinated omission).
 *
 * autocannon's `overallRate` is not steady: each connection sends as fast as it can until it has
 * made its share of the second, then waits for the next second (lib/httpClient.js), so the load
 * arrives as a saturating burst at the start of every second; and its correction for coordinated
 * omission assumes an expected interval of `Math.ceil(1 / rate)` = 1 ms per connection
 * (lib/run.js), which adds one synthetic sample per millisecond of every response. Neither is
 * the "steady rate" a fixed-rate latency goal is about, hence this generator.
 *
 * Requests go over keep-alive TCP connections, one request in flight per connection (no
 * pipelining); a due request with no idle connection waits in a queue and its wait is counted.
 * Answers are read by Content-Length (what Fastify and node:http send for JSON bodies).
 *
 * With `warmupS`, the first seconds run at the same rate on the same connections but their
 * latencies are reported apart (`warmup`): the figures are then those of the steady state, not of
 * the start of a burst on fresh connections after an idle spell. Failures count in either window.
 */
import { connect, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

// A full collection before the phase: garbage left by earlier phases of the same process (autocannon
// keeps large histograms) must not be collected while this phase's requests are due.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

export interface SteadyOptions {
  url: string;
  /** Requests per second, spread evenly (due times are computed, not slept). */
  rate: number;
  durationS: number;
  /** Seconds at the rate before the measured window, on the same connections (default 0). */
  warmupS?: number;
  /** Keep-alive connections opened up front; more than rate × p99 latency avoids queueing here. */
  connections?: number;
  headers?: Record<string, string>;
  bodies: string[];
  /** Keep each answered request's due time and latency (SteadyResult.trace). */
  record?: boolean;
}

export interface SteadyResult {
  /** 2xx answers per second over the measured window. */
  rps: number;
  /** Requests sent, 2xx answers, other answers and failures, both windows together. */
  sent: number;
  ok: number;
  non2xx: number;
  errors: number;
  /** Latency from each request's due time to its whole answer, ms. */
  p50: number;
  p99: number;
  p999: number;
  max: number;
  /** How late the generator sent requests (send time - due time), p99 in ms: its own lag. */
  sendLagP99: number;
  /** Connections that broke or were closed by the server during the phase. */
  lost: number;
  /** With `record`: each answered request's due time (ms from the measured window's start) and latency (ms). */
  trace?: { due: Float64Array; latency: Float64Array };
  /** With `warmupS`: the warm-up window's answered requests and their p99 (ms). */
  warmup?: { answered: number; p99: number };
}

interface Conn {
  socket: Socket;
  buf: Buffer;
  /** Due time of the request in flight, or -1 when idle. */
  due: number;
  /** Index of the request in flight (those below the warm-up count are not measured). */
  index: number;
  dead: boolean;
}

const HEADER_END = Buffer.from('\r\n\r\n');

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

export async function steadyLoad(o: SteadyOptions): Promise<SteadyResult> {
  const url = new URL(o.url);
  const port = Number(url.port || 80);
  const requests = o.bodies.map((body) => {
    const head = [
      `POST ${url.pathname}${url.search} HTTP/1.1`,
      `host: ${url.host}`,
      'content-type: application/json',
      ...Object.entries(o.headers ?? {}).map(([k, v]) => `${k}: ${v}`),
      `content-length: ${Buffer.byteLength(body)}`,
      '',
      '',
    ].join('\r\n');
    return Buffer.from(head + body);
  });
  if (!((o.warmupS ?? 0) >= 0)) throw new Error(`warmupS must be 0 or more, not ${o.warmupS}`);
  const warmN = Math.round(o.rate * (o.warmupS ?? 0));
  const measuredN = Math.round(o.rate * o.durationS);
  const total = warmN + measuredN;
  const latencies = new Float64Array(measuredN);
  const warmLatencies = new Float64Array(warmN);
  const dues = o.record ? new Float64Array(measuredN) : null;
  let start = 0;
  const lags = new Float64Array(measuredN);
  let lagged = 0;
  let sent = 0;
  let ok = 0;
  let non2xx = 0;
  const waiting: number[] = []; // due times of requests with no idle connection yet
  const idle: Conn[] = [];
  const interval = 1000 / o.rate;

  let finish: () => void = () => {};
  const finished = new Promise<void>((r) => {
    finish = r;
  });

  const send = (c: Conn, due: number) => {
    c.due = due;
    c.index = sent;
    if (sent >= warmN) lags[lagged++] = performance.now() - due;
    c.socket.write(requests[sent % requests.length]!);
    sent++;
  };
  let answered = 0; // latencies recorded in the measured window
  let warmAnswered = 0;
  let measuredOk = 0;
  let settled = 0; // requests answered or failed
  const connections = o.connections ?? 64;
  let live = connections;
  const settle = () => {
    if (++settled === total) finish();
  };
  const complete = (c: Conn, status: number) => {
    if (c.index < warmN) warmLatencies[warmAnswered++] = performance.now() - c.due;
    else {
      if (dues) dues[answered] = c.due - start - warmN * interval;
      latencies[answered++] = performance.now() - c.due;
      if (status >= 200 && status < 300) measuredOk++;
    }
    if (status >= 200 && status < 300) ok++;
    else non2xx++;
    c.due = -1;
    settle();
    const next = waiting.shift();
    if (next !== undefined) send(c, next);
    else idle.push(c);
  };
  /** A connection that broke or was closed is never used again; its request in flight failed. */
  const lose = (c: Conn) => {
    if (c.dead) return;
    c.dead = true;
    c.socket.destroy();
    live--;
    const at = idle.indexOf(c);
    if (at >= 0) idle.splice(at, 1);
    if (c.due >= 0) {
      c.due = -1;
      settle();
    }
    // With no connection left, what is still waiting can never be sent.
    if (live === 0) finish();
  };
  const onData = (c: Conn, chunk: Buffer) => {
    c.buf = c.buf.length === 0 ? chunk : Buffer.concat([c.buf, chunk]);
    for (;;) {
      const end = c.buf.indexOf(HEADER_END);
      if (end < 0) return;
      const head = c.buf.toString('latin1', 0, end);
      const m = /\r\ncontent-length: *(\d+)/i.exec(head);
      // Only Content-Length framing is read: anything else fails its request and the connection.
      if (!m) return lose(c);
      const size = end + 4 + Number(m[1]);
      if (c.buf.length < size) return;
      // An answer with no request in flight: the connection is out of step, so it is dropped.
      if (c.due < 0) return lose(c);
      const status = Number(head.slice(9, 12));
      c.buf = c.buf.subarray(size);
      complete(c, status);
    }
  };

  const opened = await Promise.allSettled(
    Array.from(
      { length: live },
      () =>
        new Promise<Conn>((resolve, reject) => {
          const socket = connect({ host: url.hostname, port, noDelay: true, timeout: 10_000 });
          const c: Conn = { socket, buf: Buffer.alloc(0), due: -1, index: -1, dead: false };
          socket.once('connect', () => {
            socket.setTimeout(0);
            resolve(c);
          });
          socket.once('timeout', () => reject(new Error(`no connection to ${url.host} within 10 s`)));
          socket.once('error', reject);
          socket.on('data', (chunk) => onData(c, chunk));
        }),
    ),
  );
  const conns = opened.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = opened.find((r) => r.status === 'rejected');
  if (failed) {
    for (const c of conns) c.socket.destroy();
    throw failed.reason;
  }
  for (const c of conns) {
    c.socket.removeAllListeners('error');
    c.socket.on('error', () => lose(c));
    c.socket.on('close', () => lose(c));
    idle.push(c);
  }

  collectGarbage();
  start = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let due = 0; // index of the next request to release
  const tick = () => {
    const now = performance.now();
    while (due < total && start + due * interval <= now) {
      const at = start + due * interval;
      due++;
      // Oldest idle first: every connection stays in use, so none reaches a keep-alive timeout.
      const c = idle.shift();
      if (c) send(c, at);
      else waiting.push(at);
    }
    // A timer, not setImmediate: a spinning generator would take a core from the server. Requests
    // due within one timer period go out together, late by up to about a millisecond, and that
    // lateness is counted in their latency (sendLagP99 shows it).
    if (due < total) timer = setTimeout(tick, 1);
  };
  tick();
  // Requests still unanswered 30 s after the last one was due count as errors, as do those never sent.
  const give = setTimeout(finish, ((o.warmupS ?? 0) + o.durationS + 30) * 1000);
  await finished;
  clearTimeout(timer);
  clearTimeout(give);
  // The measured window starts when its first request is due.
  const elapsed = (performance.now() - (start + warmN * interval)) / 1000;
  for (const c of conns) {
    c.dead = true;
    c.socket.destroy();
  }
  const errors = total - answered - warmAnswered;

  const trace = dues ? { due: dues.slice(0, answered), latency: latencies.slice(0, answered) } : undefined;
  const sorted = latencies.subarray(0, answered).sort();
  const lagSorted = lags.subarray(0, lagged).sort();
  const ms = (x: number) => Math.round(x * 100) / 100;
  const warmSorted = warmLatencies.subarray(0, warmAnswered).sort();
  return {
    rps: measuredOk / elapsed,
    sent,
    ok,
    non2xx,
    errors,
    p50: ms(percentile(sorted, 0.5)),
    p99: ms(percentile(sorted, 0.99)),
    p999: ms(percentile(sorted, 0.999)),
    max: ms(sorted[sorted.length - 1] ?? Number.NaN),
    sendLagP99: ms(percentile(lagSorted, 0.99)),
    lost: connections - live,
    ...(trace ? { trace } : {}),
    ...(warmN > 0 ? { warmup: { answered: warmAnswered, p99: ms(percentile(warmSorted, 0.99)) } } : {}),
  };
}
