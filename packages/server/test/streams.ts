import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { Redis } from 'ioredis';
import WebSocket from 'ws';
import { keyHeader, type Tenant, type TestApp } from './helpers.js';

export const TEST_REDIS_URL = process.env.SVC_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A validation of `tool` with no arguments under the tenant's API key: a decision event to stream. */
export const validateTool = (t: TestApp, tenant: Tenant, tool: string) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: tool, arguments: {} },
  });

/** Polls until check() returns a value other than undefined/false; fails with `what` at the deadline. */
export async function waitFor<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 10_000,
  intervalMs = 10,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export interface SseEvent {
  event: string;
  data: unknown;
  /** The event's `id:` line, when it has one. */
  id?: string;
}

/** A raw SSE reader over node:http, keeping comments and events as they arrive. */
export class SseClient {
  readonly comments: string[] = [];
  readonly events: SseEvent[] = [];
  status = 0;
  headers: http.IncomingHttpHeaders = {};
  body = '';
  ended = false;
  private buffer = '';
  private req!: http.ClientRequest;
  res: http.IncomingMessage | null = null;

  static open(url: string, headers: Record<string, string> = {}): Promise<SseClient> {
    return SseClient.request(url, 'GET', headers);
  }

  /** A POST whose answer is read as it arrives (an SSE answer, or a JSON body in `body`). */
  static post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<SseClient> {
    return SseClient.request(
      url,
      'POST',
      { 'content-type': 'application/json', ...headers },
      JSON.stringify(body),
    );
  }

  private static request(
    url: string,
    method: string,
    headers: Record<string, string>,
    body?: string,
  ): Promise<SseClient> {
    const c = new SseClient();
    return new Promise((resolve, reject) => {
      c.req = http.request(url, { method, headers }, (res) => {
        c.res = res;
        c.status = res.statusCode ?? 0;
        c.headers = res.headers;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => c.push(chunk));
        res.on('end', () => {
          c.ended = true;
        });
        res.on('close', () => {
          c.ended = true;
        });
        resolve(c);
      });
      c.req.on('error', (err) => {
        c.ended = true;
        if (!c.res) reject(err);
      });
      c.req.end(body);
    });
  }

  private push(chunk: string): void {
    this.body += chunk;
    this.buffer += chunk;
    let i = this.buffer.indexOf('\n\n');
    while (i >= 0) {
      const block = this.buffer.slice(0, i);
      this.buffer = this.buffer.slice(i + 2);
      let event = 'message';
      let data: string | null = null;
      let id: string | undefined;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) this.comments.push(line.slice(1));
        else if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('id: ')) id = line.slice(4);
        else if (line.startsWith('data: ')) data = line.slice(6);
      }
      if (data !== null)
        this.events.push({ event, data: JSON.parse(data), ...(id !== undefined ? { id } : {}) });
      i = this.buffer.indexOf('\n\n');
    }
  }

  json(): { error?: { code?: string; message?: string } } {
    return JSON.parse(this.body);
  }

  waitForEvent(predicate: (e: SseEvent) => boolean, what: string, timeoutMs?: number): Promise<SseEvent> {
    return waitFor(() => this.events.find(predicate), what, timeoutMs);
  }

  close(): void {
    this.req.destroy();
  }
}

export interface WsFrame {
  type: string;
  data: Record<string, unknown>;
}

/** A `ws` client that records frames. */
export class WsClient {
  readonly frames: WsFrame[] = [];
  closed = false;
  closeCode = 0;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (raw) => this.frames.push(JSON.parse(String(raw))));
    ws.on('close', (code) => {
      this.closed = true;
      this.closeCode = code;
    });
  }

  static open(url: string, options: WebSocket.ClientOptions = {}): Promise<WsClient> {
    const ws = new WebSocket(url, options);
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new WsClient(ws)));
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => {
          body += c;
        });
        res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { res, body })));
      });
    });
  }

  waitForFrame(predicate: (f: WsFrame) => boolean, what: string, timeoutMs?: number): Promise<WsFrame> {
    return waitFor(() => this.frames.find(predicate), what, timeoutMs);
  }

  close(): void {
    this.ws.terminate();
  }
}

/** A Redis key prefix of its own per test, and removal of everything under it. */
export function redisPrefix(): string {
  return `svc-test:${randomBytes(6).toString('hex')}:`;
}

export async function dropRedisKeys(prefix: string): Promise<void> {
  const r = new Redis(TEST_REDIS_URL);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    await r.quit();
  }
}
