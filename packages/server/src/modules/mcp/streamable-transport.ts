import type { IncomingMessage } from 'node:http';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { RawRequest } from './http-fetch.js';
import { isObject, type RpcId } from './jsonrpc.js';
import type { UpstreamLimits } from './model.js';
import { parseMessages, type RawMessage } from './raw-json.js';
import { SseLines } from './sse-lines.js';
import {
  AnswerRefused,
  AnswerStreamEnded,
  invalidAnswer,
  tooDeep,
  tooLarge,
  UpstreamError,
} from './upstream-error.js';

/**
 * How long an answer stream may stay open once its response came, and a body nobody reads (a 202,
 * the answer to a notification) may take to end: then the gateway closes the connection. An
 * upstream that keeps them open would otherwise hold one connection per request for the session.
 */
export const LINGER_MS = 1000;

/** A body nobody reads is drained up to this many bytes (so its connection is reused), else cut. */
const DISCARD_MAX_BYTES = 64 * 1024;

/** Bounds on one upstream message. */
/** The value of an SSE field line whose name and colon take `nameLength` characters (one leading space dropped). */
export const sseValue = (line: string, nameLength: number): string =>
  line.slice(line.charCodeAt(nameLength) === 32 ? nameLength + 1 : nameLength);

export type MessageBounds = Pick<UpstreamLimits, 'maxMessageBytes' | 'maxDepth'>;

/** What the transport reports about messages it refuses. */
export interface BoundHooks {
  /** A message past the size bound: the session cannot go on (its stream is cut mid-message). */
  oversize(why: string): void;
  /** A message nested past the depth bound, never parsed: its top level (null when that is not an object). */
  refused(top: Record<string, unknown> | null, why: string): void;
}

/** One HTTP exchange in progress: aborted when its request is given up or the transport closes. */
interface Exchange {
  controller: AbortController;
  /** Given up on purpose: its failure is nobody's concern any more. */
  dropped: boolean;
}

/** Whether a message is the JSON-RPC response to request `id`. */
const answers = (m: unknown, id: RpcId): boolean =>
  isObject(m) && m.jsonrpc === '2.0' && m.id === id && !('method' in m);

/**
 * The client side of MCP Streamable HTTP for upstream sessions, on node:http streams. It does what
 * the SDK's transport does for the gateway (POST each message, read a JSON or SSE answer, keep the
 * session id and protocol version headers, one standalone GET stream after initialization, DELETE
 * to end) without web streams, which cost the hot path more than the rest of the relay. Every
 * answer is bounded: a JSON body, or one SSE event, past maxMessageBytes fails the session; a message
 * nested past maxDepth is refused before it is parsed. Every exchange has its own abort: a request
 * given up (timeout, cancellation) closes its connection, and closing the transport closes them all.
 */
export class StreamableHttpTransport implements Transport {
  onmessage?: (message: JSONRPCMessage) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;
  private session: string | undefined;
  private version: string | undefined;
  private readonly exchanges = new Set<Exchange>();
  /** Exchanges of requests in progress, by request id (abortRequest). */
  private readonly requests = new Map<RpcId, Exchange>();
  private closed = false;
  private getRetries = 1;
  /** The standalone GET stream was asked for: one per session, however often the client says it is initialized. */
  private streamOpened = false;

  constructor(
    private readonly url: URL,
    private readonly headers: Record<string, string>,
    private readonly request: RawRequest,
    private readonly bounds: MessageBounds,
    private readonly hooks: BoundHooks,
    private readonly standaloneStream: boolean,
  ) {}

  get sessionId(): string | undefined {
    return this.session;
  }

  async start(): Promise<void> {}

  setProtocolVersion(version: string): void {
    this.version = version;
  }

  private commonHeaders(): Record<string, string> {
    return {
      ...this.headers,
      ...(this.session ? { 'mcp-session-id': this.session } : {}),
      ...(this.version ? { 'mcp-protocol-version': this.version } : {}),
    };
  }

  private begin(): Exchange {
    const exchange = { controller: new AbortController(), dropped: false };
    this.exchanges.add(exchange);
    return exchange;
  }

  private static drop(exchange: Exchange): void {
    exchange.dropped = true;
    exchange.controller.abort();
  }

  /** Gives up the POST of request `id`, if it is still open: its connection is closed. */
  abortRequest(id: RpcId): void {
    const exchange = this.requests.get(id);
    if (exchange) StreamableHttpTransport.drop(exchange);
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if (this.closed) throw new UpstreamError('unreachable', 'the upstream connection is closed');
    const id = 'method' in message && 'id' in message ? message.id : undefined;
    const exchange = this.begin();
    if (id !== undefined) this.requests.set(id, exchange);
    try {
      await this.post(message, id, exchange);
    } catch (err) {
      // Given up (timed out, cancelled) or closed with the session: nobody waits for it any more.
      if (exchange.dropped || this.closed) return;
      throw err;
    } finally {
      this.exchanges.delete(exchange);
      if (id !== undefined && this.requests.get(id) === exchange) this.requests.delete(id);
    }
  }

  private async post(message: JSONRPCMessage, id: RpcId | undefined, exchange: Exchange): Promise<void> {
    const res = await this.request(this.url, {
      method: 'POST',
      headers: {
        ...this.commonHeaders(),
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify(message),
      signal: exchange.controller.signal,
    });
    const sid = res.headers['mcp-session-id'];
    if (typeof sid === 'string' && sid !== '') this.session = sid;
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      const text = await this.readAll(res, 4096).catch(() => '');
      throw new UpstreamError(
        'unreachable',
        `upstream answered HTTP ${status}: ${text.slice(0, 500)}`,
        undefined,
        status,
      );
    }
    if (status === 202 || id === undefined) {
      this.discard(res);
      const isInitialized = 'method' in message && message.method === 'notifications/initialized';
      if (isInitialized && this.standaloneStream && !this.streamOpened) {
        this.streamOpened = true;
        this.openStream();
      }
      return;
    }
    const type = String(res.headers['content-type'] ?? '').toLowerCase();
    if (type.startsWith('text/event-stream')) return this.answerStream(res, id);
    if (!type.startsWith('application/json')) {
      res.destroy();
      throw new AnswerRefused(
        invalidAnswer(
          `its content type is ${type.slice(0, 100) || 'missing'}, not application/json or text/event-stream`,
        ),
      );
    }
    this.answerJson(await this.readAll(res, this.bounds.maxMessageBytes), id);
  }

  /**
   * A JSON answer: the response to `id` (alone, or in a batch with other messages). Anything that
   * is not that fails this request only.
   */
  private answerJson(text: string, id: RpcId): void {
    let messages: RawMessage[];
    try {
      messages = parseMessages(text, this.bounds.maxDepth);
    } catch (err) {
      throw new AnswerRefused(invalidAnswer(`it is not JSON (${(err as Error).message})`));
    }
    let answered = false;
    let refused = false;
    for (const m of messages) {
      const message = m.tooDeep ? m.top : m.message;
      if (answers(message, id)) answered = true;
      if (m.tooDeep) {
        refused = true;
        this.hooks.refused(m.top, tooDeep(this.bounds.maxDepth));
      } else this.deliver(message);
    }
    if (!answered) {
      throw new AnswerRefused(
        refused ? tooDeep(this.bounds.maxDepth) : invalidAnswer('it holds no response to the request'),
      );
    }
  }

  /**
   * An SSE answer: messages, and finally the response, arrive as events. A stream that ends before
   * the response fails that request now instead of leaving it to its timeout; one that stays open
   * after it is closed (LINGER_MS later, so a stream about to end keeps its connection reusable).
   */
  private answerStream(res: IncomingMessage, id: RpcId): Promise<void> {
    let answered = false;
    let linger: NodeJS.Timeout | undefined;
    return new Promise<void>((resolve, reject) => {
      this.readEvents(
        res,
        () => {
          clearTimeout(linger);
          if (answered) resolve();
          else reject(new AnswerStreamEnded());
        },
        (m) => {
          // The response, well-formed or not: what the session takes as the answer to `id`.
          if (answered || !answers(m, id)) return;
          answered = true;
          linger = setTimeout(() => res.destroy(), LINGER_MS);
          linger.unref();
        },
      );
    });
  }

  /** The standalone GET stream for the upstream's own messages; 405 means the upstream offers none. */
  private openStream(): void {
    if (this.closed) return;
    const exchange = this.begin();
    this.request(this.url, {
      method: 'GET',
      headers: { ...this.commonHeaders(), accept: 'text/event-stream' },
      signal: exchange.controller.signal,
    }).then(
      (res) => {
        if (res.statusCode !== 200) {
          this.exchanges.delete(exchange);
          this.discard(res);
          return;
        }
        this.readEvents(res, () => {
          this.exchanges.delete(exchange);
          // A dropped stream is opened again once; lost requests end in their own timeouts.
          if (!this.closed && this.getRetries-- > 0) setTimeout(() => this.openStream(), 1000).unref();
        });
      },
      (err: Error) => {
        this.exchanges.delete(exchange);
        if (!this.closed) this.onerror?.(err);
      },
    );
  }

  private deliver(m: unknown): void {
    if (isObject(m) && m.jsonrpc === '2.0') this.onmessage?.(m as unknown as JSONRPCMessage);
  }

  /**
   * A body nobody needs (a 202, the answer to a notification): drained so the connection can be
   * reused, but cut when it is large or does not end within LINGER_MS.
   */
  private discard(res: IncomingMessage): void {
    if (res.complete) {
      res.resume();
      return;
    }
    const cut = setTimeout(() => res.destroy(), LINGER_MS);
    cut.unref();
    let size = 0;
    res.on('data', (c: Buffer) => {
      size += c.length;
      if (size > DISCARD_MAX_BYTES) res.destroy();
    });
    res.on('error', () => {});
    res.on('close', () => clearTimeout(cut));
  }

  private readAll(res: IncomingMessage, max: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > max) {
          const why = tooLarge(max);
          res.destroy();
          if (max === this.bounds.maxMessageBytes) this.hooks.oversize(why);
          reject(new UpstreamError('invalid', why));
          return;
        }
        chunks.push(c);
      });
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', reject);
      res.on('close', () => reject(new UpstreamError('unreachable', 'the upstream answer was cut off')));
    });
  }

  /** The messages of one SSE event's data, each shown to `seen` (a refused one as its top level). */
  private receive(text: string, seen?: (m: unknown) => void): void {
    try {
      for (const m of parseMessages(text, this.bounds.maxDepth)) {
        if (m.tooDeep) {
          seen?.(m.top);
          this.hooks.refused(m.top, tooDeep(this.bounds.maxDepth));
        } else {
          seen?.(m.message);
          this.deliver(m.message);
        }
      }
    } catch (err) {
      this.onerror?.(err as Error);
    }
  }

  /**
   * SSE: `data:` lines of one event joined; an event without a type or of type `message` carries
   * JSON-RPC messages, shown to `seen` before they are delivered. `onEnd` when the stream closes.
   */
  private readEvents(res: IncomingMessage, onEnd?: () => void, seen?: (m: unknown) => void): void {
    res.setEncoding('utf8');
    const lines = new SseLines();
    /** The line being received, in pieces until its end comes. */
    let partial: string[] = [];
    let partialLength = 0;
    let data: string[] = [];
    let dataBytes = 0;
    let type = '';
    const dispatch = () => {
      if (data.length > 0 && (type === '' || type === 'message')) this.receive(data.join('\n'), seen);
      data = [];
      dataBytes = 0;
      type = '';
    };
    const oversize = () => {
      res.destroy();
      this.hooks.oversize(tooLarge(this.bounds.maxMessageBytes));
    };
    res.on('data', (chunk: string) => {
      // Only the new chunk is searched for line ends (CRLF, LF or CR alone), and a long line is
      // joined once: a line of megabytes arriving in many chunks costs its length, not its length
      // times the chunks.
      lines.start(chunk);
      while (lines.next()) {
        let line = chunk.slice(lines.from, lines.to);
        if (partial.length > 0) {
          partial.push(line);
          line = partial.join('');
          partial = [];
          partialLength = 0;
        }
        if (line === '') dispatch();
        else if (line.startsWith('data:')) {
          const value = sseValue(line, 5);
          data.push(value);
          dataBytes += Buffer.byteLength(value);
          if (dataBytes > this.bounds.maxMessageBytes) return oversize();
        } else if (line.startsWith('event:')) type = sseValue(line, 6);
      }
      const rest = lines.after;
      if (rest < chunk.length) {
        partial.push(chunk.slice(rest));
        partialLength += chunk.length - rest;
      }
      if (dataBytes + partialLength > this.bounds.maxMessageBytes) oversize();
    });
    res.on('error', () => {});
    res.on('close', () => onEnd?.());
  }

  /** DELETE: ends the session upstream. */
  async terminateSession(): Promise<void> {
    if (!this.session) return;
    const exchange = this.begin();
    try {
      const res = await this.request(this.url, {
        method: 'DELETE',
        headers: this.commonHeaders(),
        signal: exchange.controller.signal,
      });
      this.discard(res);
    } finally {
      this.exchanges.delete(exchange);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const exchange of this.exchanges) StreamableHttpTransport.drop(exchange);
    this.exchanges.clear();
    this.requests.clear();
    this.onclose?.();
  }
}
