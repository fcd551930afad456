import { setMaxListeners } from 'node:events';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike, Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { RawRequest } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import {
  isBatchText,
  messageNestedDeeperThan,
  parseMessages,
  type RawMessage,
  textNestedDeeperThan,
  topLevelOf,
} from './raw-json.js';
import { SseLines } from './sse-lines.js';
import {
  type BoundHooks,
  type MessageBounds,
  StreamableHttpTransport,
  sseValue,
} from './streamable-transport.js';
import { tooDeep, tooLarge, UpstreamError } from './upstream-error.js';

export { UpstreamError };

import { ALLOW_PRIVATE_HINT, type Lookup, upstreamHostRefusal } from './ssrf.js';

/** `mcp-sse`: the HTTP+SSE transport (MCP 2024-11-05); `mcp-streamable-http`: Streamable HTTP (2025-03-26 on). */
export const TRANSPORTS = ['mcp-streamable-http', 'mcp-sse'] as const;
export type UpstreamTransport = (typeof TRANSPORTS)[number];

export interface UpstreamTarget {
  id: string;
  transport: UpstreamTransport;
  url: string;
  headers: Record<string, string>;
  timeoutMs: number;
}

export const GATEWAY_CLIENT_INFO = { name: 'svc-gateway', version: '0.1.0' };

function describe(err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } } | null;
  const cause = e?.cause?.code ?? e?.cause?.message;
  const msg = e?.message ?? String(err);
  return cause && !msg.includes(cause) ? `${msg} (${cause})` : msg;
}

export function toUpstreamError(err: unknown): UpstreamError {
  if (err instanceof UpstreamError) return err;
  if (err instanceof McpError && err.code !== ErrorCode.ConnectionClosed) {
    // McpError prefixes "MCP error <code>: "; the upstream's own message is what follows.
    const message = err.message.replace(/^MCP error -?\d+: /, '');
    return new UpstreamError('rpc', `upstream answered error ${err.code}: ${message}`, {
      code: err.code,
      message,
      ...(err.data !== undefined ? { data: err.data } : {}),
    });
  }
  if (err instanceof StreamableHTTPError || err instanceof SseError) {
    const status = typeof err.code === 'number' && err.code > 0 ? err.code : undefined;
    return new UpstreamError('unreachable', describe(err), undefined, status);
  }
  return new UpstreamError('unreachable', describe(err));
}

/** Rejects with a timeout UpstreamError after `ms`, calling onTimeout first (to close what is pending). */
export function withTimeout<T>(work: Promise<T>, ms: number, onTimeout: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new UpstreamError('timeout', `no answer within ${ms} ms`));
    }, ms);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

export interface OpenOptions {
  allowPrivate: boolean;
  lookup?: Lookup;
  /** The fetch to use (the address-checked one); probeUpstream wraps it to record HTTP statuses. */
  fetch?: FetchLike;
  /** Raw requests on the same checked agents: upstream sessions over Streamable HTTP use them directly. */
  request?: RawRequest;
  /** Open the standalone GET stream after initialization (false for one-request sessions). */
  standaloneStream?: boolean;
  /** Told the outcome (`ok` or the failure kind) and duration of every request sent upstream. */
  observe?: (method: string, outcome: string, seconds: number) => void;
}

/**
 * The SDK transports hand one long-lived AbortSignal to every fetch, and undici keeps a listener on it
 * per request until garbage collection: under load thousands pile up, every add gets slower and Node
 * warns. A POST gets a signal of its own, linked to the transport's until its body is read to the
 * end, fails or is cancelled (closing the client must still stop a body that keeps coming); the GET
 * streams (few, long-lived) keep the transport's signal so that closing the client ends them.
 */
function ownSignalPerPost(base: FetchLike): FetchLike {
  return async (url, init) => {
    const shared = init?.signal;
    if (!shared || (init?.method ?? 'GET').toUpperCase() === 'GET') return base(url, init);
    shared.throwIfAborted();
    // One listener per POST in flight: many concurrent calls are normal, not a leak.
    setMaxListeners(0, shared);
    const own = new AbortController();
    const forward = () => own.abort(shared.reason);
    shared.addEventListener('abort', forward, { once: true });
    const unlink = () => shared.removeEventListener('abort', forward);
    let res: Response;
    try {
      res = await base(url, { ...init, signal: own.signal });
    } catch (err) {
      unlink();
      throw err;
    }
    if (!res.body) {
      unlink();
      return res;
    }
    return new Response(untilConsumed(res.body, unlink), {
      status: res.status,
      statusText: res.statusText,
      headers: res.headers,
    });
  };
}

/** The same body, calling `done` once it has been read to its end, failed or been cancelled. */
function untilConsumed(body: ReadableStream<Uint8Array>, done: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const next = await reader.read();
          if (next.done) {
            done();
            controller.close();
          } else controller.enqueue(next.value);
        } catch (err) {
          done();
          controller.error(err);
        }
      },
      cancel(reason) {
        done();
        return reader.cancel(reason);
      },
    },
    // Nothing is read ahead of the reader: a body never read stays linked until it is cancelled.
    { highWaterMark: 0 },
  );
}

function transportFor(target: UpstreamTarget, base: FetchLike = fetch): Transport {
  const url = new URL(target.url);
  const requestInit: RequestInit = { headers: target.headers };
  const fetchImpl = ownSignalPerPost(base);
  if (target.transport === 'mcp-sse') return new SSEClientTransport(url, { requestInit, fetch: fetchImpl });
  return new StreamableHTTPClientTransport(url, {
    requestInit,
    fetch: fetchImpl,
    // A dropped standalone GET stream is retried once; the pool replaces clients that fail calls.
    reconnectionOptions: {
      initialReconnectionDelay: 1000,
      maxReconnectionDelay: 5000,
      reconnectionDelayGrowFactor: 2,
      maxRetries: 1,
    },
  });
}

const LF = 10;
const CR = 13;

/** Ends a bounded body that went past maxMessageBytes, telling the session why. */
function overflow(
  bounds: MessageBounds,
  hooks: BoundHooks,
  controller: TransformStreamDefaultController<Uint8Array>,
): void {
  const why = tooLarge(bounds.maxMessageBytes);
  hooks.oversize(why);
  controller.error(new UpstreamError('invalid', why));
}

/**
 * A JSON body, held until it is complete: larger than maxMessageBytes it errors (oversize), nested
 * past maxDepth it errors before anyone parses it.
 */
function boundedJson(bounds: MessageBounds, hooks: BoundHooks): TransformStream<Uint8Array, Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  return new TransformStream({
    transform(chunk, controller) {
      size += chunk.byteLength;
      if (size > bounds.maxMessageBytes) return overflow(bounds, hooks, controller);
      chunks.push(chunk);
    },
    flush(controller) {
      const body = Buffer.concat(chunks);
      if (messageNestedDeeperThan(body.toString('utf8'), bounds.maxDepth)) {
        controller.error(new UpstreamError('invalid', tooDeep(bounds.maxDepth)));
        return;
      }
      if (body.byteLength > 0) controller.enqueue(body);
    },
  });
}

/** The JSON-RPC text of one SSE event (its `data:` lines joined), or null when it is of another type. */
function eventData(event: string): string | null {
  const data: string[] = [];
  let type = '';
  // Lines end in CRLF, LF or CR alone.
  for (const line of event.split(/\r\n|\r|\n/)) {
    if (line.startsWith('data:')) data.push(sseValue(line, 5));
    else if (line.startsWith('event:')) type = sseValue(line, 6);
  }
  return data.length > 0 && (type === '' || type === 'message') ? data.join('\n') : null;
}

const encoder = new TextEncoder();
const LF_BYTES = Uint8Array.of(LF);

/**
 * An SSE body passed on one whole event at a time (the reader dispatches an event only at its end
 * anyway): an event larger than maxMessageBytes errors the stream (oversize); one whose message
 * nests past maxDepth is left out, never parsed, and reported as refused. A batch goes on as its
 * messages, one event each (the SDK transports read one message an event), those nested past
 * maxDepth refused one by one as a message alone is. Lines end in CRLF, LF or CR alone.
 */
function boundedEvents(bounds: MessageBounds, hooks: BoundHooks): TransformStream<Uint8Array, Uint8Array> {
  const lines = new SseLines();
  let pieces: Uint8Array[] = [];
  /** The event's bytes so far, but for the LF of each CRLF. */
  let size = 0;
  /** A line of the event ended, and nothing came after it yet: a line end next is a blank line, which ends the event. */
  let lineEnded = false;
  /** The last event ended with the chunk, on a CR: an LF starting the next chunk is its CRLF's. */
  let endedOnCr = false;
  const refuse = (top: Record<string, unknown> | null) => hooks.refused(top, tooDeep(bounds.maxDepth));
  /** Passes the event received. */
  const pass = (controller: TransformStreamDefaultController<Uint8Array>) => {
    const event = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces);
    pieces = [];
    size = 0;
    // An event ending on a CR alone would wait in the reader, which holds a last CR until it sees
    // whether an LF follows: it goes on ended by CRLF (an LF still to come, starting the next chunk,
    // is left out then).
    const whole = () => (event[event.byteLength - 1] === CR ? Buffer.concat([event, LF_BYTES]) : event);
    const text = Buffer.from(event.buffer, event.byteOffset, event.byteLength).toString('utf8');
    const data = eventData(text);
    if (data !== null && isBatchText(data)) {
      let messages: RawMessage[];
      try {
        messages = parseMessages(data, bounds.maxDepth);
      } catch {
        // Not JSON: passed on to fail as any such event does, unless it is too deep to parse at all.
        if (!messageNestedDeeperThan(data, bounds.maxDepth)) controller.enqueue(whole());
        return;
      }
      // One chunk for the whole batch; elements that are not objects are no messages (the reader
      // would drop each of them with an error).
      let out = '';
      for (const m of messages) {
        if (m.tooDeep) refuse(m.top);
        else if (typeof m.message === 'object' && m.message !== null && !Array.isArray(m.message))
          out += `event: message\ndata: ${JSON.stringify(m.message)}\n\n`;
      }
      if (out !== '') controller.enqueue(encoder.encode(out));
      return;
    }
    if (data !== null && textNestedDeeperThan(data, bounds.maxDepth)) return refuse(topLevelOf(data));
    controller.enqueue(whole());
  };
  return new TransformStream({
    transform(chunk, controller) {
      const skippedLf = lines.start(chunk);
      // The LF of a CRLF whose CR ended the last event: that event went on ended by CRLF already.
      let start = skippedLf && endedOnCr ? 1 : 0;
      if (chunk.byteLength > 0) endedOnCr = false;
      while (lines.next()) {
        const { from, to, after } = lines;
        if (from === to && lineEnded) {
          // A blank line: the event ends here (with the LF of a CRLF when it is in this chunk).
          endedOnCr = after === chunk.byteLength && chunk[after - 1] === CR;
          pieces.push(chunk.subarray(start, after));
          start = after;
          pass(controller);
          lineEnded = false;
          continue;
        }
        lineEnded = true;
        size += to - from + 1;
        if (size > bounds.maxMessageBytes) return overflow(bounds, hooks, controller);
      }
      if (lines.after < chunk.byteLength) {
        lineEnded = false;
        size += chunk.byteLength - lines.after;
        if (size > bounds.maxMessageBytes) return overflow(bounds, hooks, controller);
      }
      if (start < chunk.byteLength) pieces.push(chunk.subarray(start));
    },
    flush(controller) {
      if (pieces.length > 0) pass(controller);
    },
  });
}

/** Any other body: counted, erroring past maxMessageBytes. */
function boundedBody(bounds: MessageBounds, hooks: BoundHooks): TransformStream<Uint8Array, Uint8Array> {
  let size = 0;
  return new TransformStream({
    transform(chunk, controller) {
      size += chunk.byteLength;
      if (size > bounds.maxMessageBytes) return overflow(bounds, hooks, controller);
      controller.enqueue(chunk);
    },
  });
}

/**
 * A fetch whose answers are bounded before the SDK transports parse them: a JSON body, or one event
 * of an SSE stream, larger than maxMessageBytes errors the body and reports why (the session using
 * it then ends); a message nested deeper than maxDepth is refused unparsed (a JSON body errors, an
 * SSE event is left out and reported).
 */
export function boundedUpstreamFetch(base: FetchLike, bounds: MessageBounds, hooks: BoundHooks): FetchLike {
  return async (url, init) => {
    const res = await base(url, init);
    if (!res.body) return res;
    const type = (res.headers.get('content-type') ?? '').toLowerCase();
    const bound = type.includes('text/event-stream')
      ? boundedEvents(bounds, hooks)
      : type.includes('json')
        ? boundedJson(bounds, hooks)
        : boundedBody(bounds, hooks);
    return new Response(res.body.pipeThrough(bound), {
      status: res.status,
      statusText: res.statusText,
      headers: res.headers,
    });
  };
}

/**
 * The transport of one upstream session (not connected yet): the address checked again (DNS may
 * have changed since the URL was saved), answers bounded to maxBytes per message.
 */
export async function openTransport(
  target: UpstreamTarget,
  options: OpenOptions,
  bounds: MessageBounds,
  hooks: BoundHooks,
): Promise<Transport> {
  const refusal = await upstreamHostRefusal(new URL(target.url), { ...options, requireResolution: true });
  if (refusal)
    throw new UpstreamError('refused', `upstream address refused: ${refusal} (${ALLOW_PRIVATE_HINT})`);
  if (target.transport === 'mcp-streamable-http' && options.request) {
    return new StreamableHttpTransport(
      new URL(target.url),
      target.headers,
      options.request,
      bounds,
      hooks,
      options.standaloneStream ?? true,
    );
  }
  return transportFor(target, boundedUpstreamFetch(options.fetch ?? fetch, bounds, hooks));
}

/**
 * What a probe does with what is past a bound: the request concerned fails, nothing else. A body
 * past the size bound fails it by erroring; a response refused for its depth is only reported, so
 * `failed` rejects with the reason a session gives (a probe has one request in flight at a time).
 */
interface ProbeBounds {
  hooks: BoundHooks;
  failed: Promise<never>;
}

function probeBounds(): ProbeBounds {
  let fail!: (err: UpstreamError) => void;
  const failed = new Promise<never>((_, reject) => {
    fail = reject;
  });
  failed.catch(() => {});
  return {
    failed,
    hooks: {
      oversize: () => {},
      // Only a response answers the probe's request; a request or notification refused changes nothing.
      refused: (top, why) => {
        if (top && !('method' in top)) fail(new UpstreamError('invalid', why));
      },
    },
  };
}

/**
 * Connects an SDK client to the upstream and completes the MCP handshake within timeoutMs. The
 * address is checked again here, not only when the URL was saved: DNS may have changed since. Its
 * answers are bounded as an upstream session's are; `probe.failed` ends the handshake early.
 */
export async function openClient(
  target: UpstreamTarget,
  options: OpenOptions,
  bounds: MessageBounds = DEFAULT_UPSTREAM_LIMITS,
  probe: ProbeBounds = probeBounds(),
): Promise<Client> {
  const refusal = await upstreamHostRefusal(new URL(target.url), { ...options, requireResolution: true });
  if (refusal)
    throw new UpstreamError('refused', `upstream address refused: ${refusal} (${ALLOW_PRIVATE_HINT})`);
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities: {} });
  try {
    await withTimeout(
      Promise.race([
        client.connect(
          transportFor(target, boundedUpstreamFetch(options.fetch ?? fetch, bounds, probe.hooks)),
          { timeout: target.timeoutMs },
        ),
        probe.failed,
      ]),
      target.timeoutMs,
      () => {
        void client.close().catch(() => {});
      },
    );
  } catch (err) {
    await client.close().catch(() => {});
    throw toUpstreamError(err);
  }
  return client;
}

export interface ProbeResult {
  ok: boolean;
  status: number;
  latencyMs: number;
  message: string;
}

/**
 * POST /v1/mcp/upstreams/:id/test: a fresh connection (never a session's), initialize, then
 * tools/list, within timeoutMs and the bounds of a session's messages; closing the client at the
 * end (or at timeoutMs) closes every connection it opened, bodies still coming included.
 */
export async function probeUpstream(target: UpstreamTarget, options: OpenOptions): Promise<ProbeResult> {
  const statuses: number[] = [];
  let failed: number | undefined;
  const base = options.fetch ?? fetch;
  const recording: FetchLike = async (url, init) => {
    const res = await base(url, init);
    statuses.push(res.status);
    // A GET answered 405 only means the upstream offers no standalone stream: not a failure.
    if (!res.ok && !(res.status === 405 && (init?.method ?? 'GET') === 'GET')) failed ??= res.status;
    return res;
  };
  const started = performance.now();
  const latency = () => Math.round((performance.now() - started) * 1000) / 1000;
  let client: Client | null = null;
  let stage = 'initialize';
  const probe = probeBounds();
  try {
    client = await openClient(target, { ...options, fetch: recording }, DEFAULT_UPSTREAM_LIMITS, probe);
    stage = 'tools/list';
    // Both steps within timeoutMs: tools/list has what initialize left.
    const left = Math.max(1, Math.round(target.timeoutMs - (performance.now() - started)));
    const listed = await withTimeout(
      Promise.race([client.listTools(undefined, { timeout: left }), probe.failed]),
      left,
      () => {},
    );
    const n = listed.tools.length;
    const server = client.getServerVersion();
    const name = server ? ` ${server.name} ${server.version}` : '';
    return {
      ok: true,
      status: statuses[0] ?? 200,
      latencyMs: latency(),
      message: `Connected to${name}; ${n} tool${n === 1 ? '' : 's'} available`,
    };
  } catch (err) {
    const e = toUpstreamError(err);
    return {
      ok: false,
      // 0 when no HTTP answer came at all (refused, unreachable); else the last status seen.
      status: e.status ?? failed ?? (e.kind === 'refused' ? 0 : (statuses.at(-1) ?? 0)),
      latencyMs: latency(),
      message: `${stage} failed: ${e.message}`,
    };
  } finally {
    await client?.close().catch(() => {});
  }
}
