import type { IncomingMessage } from 'node:http';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { RawRequest } from './http-fetch.js';
import { isObject } from './jsonrpc.js';
import { AnswerStreamEnded, UpstreamError } from './upstream-error.js';

/**
 * The client side of MCP Streamable HTTP for upstream sessions, on node:http streams. It does what
 * the SDK's transport does for the gateway (POST each message, read a JSON or SSE answer, keep the
 * session id and protocol version headers, one standalone GET stream after initialization, DELETE
 * to end) without web streams, which cost the hot path more than the rest of the relay. Every
 * answer is bounded: a JSON body, or one SSE event, past maxBytes fails the session.
 */
export class StreamableHttpTransport implements Transport {
  onmessage?: (message: JSONRPCMessage) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;
  private session: string | undefined;
  private version: string | undefined;
  private readonly aborter = new AbortController();
  private closed = false;
  private getRetries = 1;

  constructor(
    private readonly url: URL,
    private readonly headers: Record<string, string>,
    private readonly request: RawRequest,
    private readonly maxBytes: number,
    private readonly onOversize: (why: string) => void,
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

  async send(message: JSONRPCMessage): Promise<void> {
    if (this.closed) throw new UpstreamError('unreachable', 'the upstream connection is closed');
    const res = await this.request(this.url, {
      method: 'POST',
      headers: {
        ...this.commonHeaders(),
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify(message),
      signal: this.aborter.signal,
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
    const isInitialized = 'method' in message && message.method === 'notifications/initialized';
    if (status === 202 || !('id' in message) || !('method' in message)) {
      res.resume();
      if (isInitialized && this.standaloneStream) this.openStream();
      return;
    }
    const type = String(res.headers['content-type'] ?? '').toLowerCase();
    if (type.startsWith('text/event-stream')) {
      // Answered as a stream: messages (and finally the response) arrive as events. A stream that
      // ends before the response fails that request now instead of leaving it to its timeout.
      const id = message.id;
      let answered = false;
      await new Promise<void>((resolve, reject) => {
        this.readEvents(
          res,
          () => (answered ? resolve() : reject(new AnswerStreamEnded())),
          (m) => {
            // The response, well-formed or not: what the session takes as the answer to `id`.
            if (isObject(m) && m.id === id && !('method' in m)) answered = true;
          },
        );
      });
      return;
    }
    if (!type.startsWith('application/json')) {
      res.resume();
      throw new UpstreamError(
        'unreachable',
        `upstream answered an unexpected content type: ${type || 'none'}`,
      );
    }
    const text = await this.readAll(res, this.maxBytes);
    const parsed: unknown = JSON.parse(text);
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) this.deliver(m);
  }

  /** The standalone GET stream for the upstream's own messages; 405 means the upstream offers none. */
  private openStream(): void {
    if (this.closed) return;
    this.request(this.url, {
      method: 'GET',
      headers: { ...this.commonHeaders(), accept: 'text/event-stream' },
      signal: this.aborter.signal,
    }).then(
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          return;
        }
        this.readEvents(res, () => {
          // A dropped stream is opened again once; lost requests end in their own timeouts.
          if (!this.closed && this.getRetries-- > 0) setTimeout(() => this.openStream(), 1000).unref();
        });
      },
      (err: Error) => {
        if (!this.closed) this.onerror?.(err);
      },
    );
  }

  private deliver(m: unknown): void {
    if (isObject(m) && m.jsonrpc === '2.0') this.onmessage?.(m as unknown as JSONRPCMessage);
  }

  private readAll(res: IncomingMessage, max: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > max) {
          const why = `upstream message larger than ${max} bytes`;
          res.destroy();
          if (max === this.maxBytes) this.onOversize(why);
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

  /**
   * SSE: `data:` lines of one event joined; an event without a type or of type `message` is a
   * JSON-RPC message, shown to `seen` before it is delivered. `onEnd` when the stream closes.
   */
  private readEvents(res: IncomingMessage, onEnd?: () => void, seen?: (m: unknown) => void): void {
    res.setEncoding('utf8');
    let buffer = '';
    let data: string[] = [];
    let dataBytes = 0;
    let type = '';
    const dispatch = () => {
      if (data.length > 0 && (type === '' || type === 'message')) {
        try {
          const m: unknown = JSON.parse(data.join('\n'));
          seen?.(m);
          this.deliver(m);
        } catch (err) {
          this.onerror?.(err as Error);
        }
      }
      data = [];
      dataBytes = 0;
      type = '';
    };
    const oversize = () => {
      res.destroy();
      this.onOversize(`upstream message larger than ${this.maxBytes} bytes`);
    };
    res.on('data', (chunk: string) => {
      buffer += chunk;
      let nl = buffer.indexOf('\n');
      while (nl >= 0) {
        const line = buffer.charCodeAt(nl - 1) === 13 ? buffer.slice(0, nl - 1) : buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line === '') dispatch();
        else if (line.startsWith('data:')) {
          const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
          data.push(value);
          dataBytes += Buffer.byteLength(value);
          if (dataBytes > this.maxBytes) return oversize();
        } else if (line.startsWith('event:')) type = line.slice(line.charCodeAt(6) === 32 ? 7 : 6);
        nl = buffer.indexOf('\n');
      }
      if (dataBytes + buffer.length > this.maxBytes) oversize();
    });
    res.on('error', () => {});
    res.on('close', () => onEnd?.());
  }

  /** DELETE: ends the session upstream. */
  async terminateSession(): Promise<void> {
    if (!this.session) return;
    const res = await this.request(this.url, { method: 'DELETE', headers: this.commonHeaders() });
    res.resume();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.aborter.abort();
    this.onclose?.();
  }
}
