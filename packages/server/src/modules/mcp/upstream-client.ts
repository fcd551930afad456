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
import { StreamableHttpTransport } from './streamable-transport.js';
import { UpstreamError } from './upstream-error.js';

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
 * warns. A POST gets a signal of its own, linked to the transport's until its answer arrives; the GET
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
    try {
      return await base(url, { ...init, signal: own.signal });
    } finally {
      shared.removeEventListener('abort', forward);
    }
  };
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

/**
 * A fetch whose answers are bounded: a JSON body, or one event of an SSE stream, larger than
 * maxBytes errors the body and reports why (the session using it then ends).
 */
export function boundedFetch(
  base: FetchLike,
  maxBytes: number,
  onOversize: (why: string) => void,
): FetchLike {
  return async (url, init) => {
    const res = await base(url, init);
    if (!res.body) return res;
    const sse = (res.headers.get('content-type') ?? '').toLowerCase().includes('text/event-stream');
    let size = 0;
    let lastNewline = false;
    const why = `upstream message larger than ${maxBytes} bytes`;
    const counted = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          let over = false;
          if (!sse) {
            size += chunk.byteLength;
            over = size > maxBytes;
          } else {
            // Bytes since the last blank line (the end of an SSE event); CRs are ignored.
            for (let i = 0; i < chunk.byteLength && !over; i++) {
              const b = chunk[i]!;
              if (b === 13) continue;
              if (b === 10 && lastNewline) size = 0;
              else over = ++size > maxBytes;
              lastNewline = b === 10;
            }
          }
          if (over) {
            onOversize(why);
            controller.error(new UpstreamError('invalid', why));
            return;
          }
          controller.enqueue(chunk);
        },
      }),
    );
    return new Response(counted, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/**
 * The transport of one upstream session (not connected yet): the address checked again (DNS may
 * have changed since the URL was saved), answers bounded to maxBytes per message.
 */
export async function openTransport(
  target: UpstreamTarget,
  options: OpenOptions,
  maxBytes: number,
  onOversize: (why: string) => void,
): Promise<Transport> {
  const refusal = await upstreamHostRefusal(new URL(target.url), { ...options, requireResolution: true });
  if (refusal)
    throw new UpstreamError('refused', `upstream address refused: ${refusal} (${ALLOW_PRIVATE_HINT})`);
  if (target.transport === 'mcp-streamable-http' && options.request) {
    return new StreamableHttpTransport(
      new URL(target.url),
      target.headers,
      options.request,
      maxBytes,
      onOversize,
      options.standaloneStream ?? true,
    );
  }
  return transportFor(target, boundedFetch(options.fetch ?? fetch, maxBytes, onOversize));
}

/**
 * Connects an SDK client to the upstream and completes the MCP handshake within timeoutMs. The
 * address is checked again here, not only when the URL was saved: DNS may have changed since.
 */
export async function openClient(target: UpstreamTarget, options: OpenOptions): Promise<Client> {
  const refusal = await upstreamHostRefusal(new URL(target.url), { ...options, requireResolution: true });
  if (refusal)
    throw new UpstreamError('refused', `upstream address refused: ${refusal} (${ALLOW_PRIVATE_HINT})`);
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities: {} });
  try {
    await withTimeout(
      client.connect(transportFor(target, options.fetch), { timeout: target.timeoutMs }),
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

/** POST /v1/mcp/upstreams/:id/test: a fresh connection (never a session's), initialize, then tools/list. */
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
  try {
    client = await openClient(target, { ...options, fetch: recording });
    stage = 'tools/list';
    const listed = await withTimeout(
      client.listTools(undefined, { timeout: target.timeoutMs }),
      target.timeoutMs,
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
