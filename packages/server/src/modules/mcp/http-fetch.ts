import { AsyncLocalStorage } from 'node:async_hooks';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { Readable } from 'node:stream';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ALLOW_PRIVATE_HINT, blockedAddressReason } from './ssrf.js';

const NULL_BODY = new Set([101, 204, 205, 304]);

function toHeaders(res: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, value);
  }
  return headers;
}

/** Resolves every address of a host (dns.lookup with `all: true`). Injected in tests. */
export type ResolveAll = (
  hostname: string,
  options: LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/**
 * The sockets' own DNS lookup, refusing blocked addresses. The address guard resolves the name
 * before connecting, but the socket resolves it again: without this, a name that answered a public
 * address to the guard could answer a metadata address to the socket (DNS rebinding).
 */
export function checkedLookup(resolveAll: ResolveAll = dnsLookup as ResolveAll): LookupFunction {
  return (hostname, options, callback) => {
    resolveAll(hostname, { ...options, all: true }, (err, addresses) => {
      const cb = callback as (...args: unknown[]) => void;
      if (err) return cb(err);
      for (const a of addresses) {
        const why = blockedAddressReason(a.address);
        if (why) {
          const refused = Object.assign(
            new Error(`upstream address refused: ${hostname} resolves to ${why} (${ALLOW_PRIVATE_HINT})`),
            { code: 'EADDRREFUSED' },
          );
          return cb(refused);
        }
      }
      if (options.all) return cb(null, addresses);
      const first = addresses[0];
      if (!first) return cb(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }));
      return cb(null, first.address, first.family);
    });
  };
}

/**
 * Connections per origin (scheme, host, port) for requests (POST, DELETE…): past it a request waits
 * for a free connection (within its own timeout). Event streams (GET) are not counted: they are
 * long-lived, one per upstream session, and bounded by the session bounds; counted, a few hundred
 * open streams would leave no connection for the requests of the sessions they belong to.
 */
export const MAX_SOCKETS_PER_ORIGIN = 256;

/**
 * Whether a request that failed may be sent once more on another connection: it went out on a kept-
 * alive connection the upstream closed meanwhile (its idle timeout ending as the request left), so
 * the upstream never read it. A tool call is never sent twice: were the connection reset after the
 * upstream read it, the tool would run again.
 */
function staleConnection(req: { reusedSocket: boolean }, err: unknown, body: string | undefined): boolean {
  return (
    req.reusedSocket &&
    (err as NodeJS.ErrnoException)?.code === 'ECONNRESET' &&
    !(body !== undefined && TOOL_CALL.test(body))
  );
}
const TOOL_CALL = /"method"\s*:\s*"tools\/call"/;

/** Set (run) while the gateway sends a message of its own upstream: it goes outside the bounded pool. */
export const ownMessage = new AsyncLocalStorage<true>();

export interface HttpFetchOptions {
  /** SVC_MCP_ALLOW_PRIVATE_UPSTREAMS: sockets may reach any address. */
  allowPrivate: boolean;
  resolveAll?: ResolveAll;
  /** Request connections per origin (default MAX_SOCKETS_PER_ORIGIN). */
  maxSocketsPerOrigin?: number;
}

/**
 * The fetch of the upstream connections, on node:http(s) with keep-alive agents: undici's
 * fetch costs about 1 ms more CPU per request than node:http (see bench/gateway.ts), which is the
 * gateway's whole latency budget. It covers what the SDK transports send (string or no body,
 * headers, AbortSignal) and streams the answer (JSON or SSE). Redirects are returned, never
 * followed: the transports follow same-origin ones themselves. Sockets resolve names through
 * checkedLookup unless private upstreams are allowed. Other bodies or schemes are refused. At most
 * MAX_SOCKETS_PER_ORIGIN connections per origin carry requests, whatever an upstream does.
 */
/** One HTTP request on the checked keep-alive agents, answered as Node's own response stream. */
export type RawRequest = (
  url: URL,
  init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal },
) => Promise<IncomingMessage>;

export function createHttpFetch(options: HttpFetchOptions): {
  fetch: FetchLike;
  request: RawRequest;
  close(): void;
} {
  const lookup = options.allowPrivate ? undefined : checkedLookup(options.resolveAll);
  const common = { keepAlive: true, ...(lookup ? { lookup } : {}) };
  const bounded = { ...common, maxSockets: options.maxSocketsPerOrigin ?? MAX_SOCKETS_PER_ORIGIN };
  const agents = { 'http:': new HttpAgent(bounded), 'https:': new HttpsAgent(bounded) };
  const streamAgents = { 'http:': new HttpAgent(common), 'https:': new HttpsAgent(common) };
  /**
   * Requests (tool calls…) on the bounded agents. Event streams (GET) and the gateway's own messages
   * (answers to the upstream's requests, notifications: one at a time per upstream session, so the
   * session bounds bound them) on their own: a call held open while the upstream waits for the
   * client's sampling answer must never keep that answer from a connection.
   */
  const agentFor = (protocol: string, method: string) =>
    (method === 'GET' || ownMessage.getStore() === true ? streamAgents : agents)[
      protocol as 'http:' | 'https:'
    ];
  const request: RawRequest = (url, init) => {
    if (!(url.protocol in agents))
      return Promise.reject(new TypeError(`unsupported upstream scheme ${url.protocol}`));
    const headers = { ...init.headers };
    if (init.body !== undefined) headers['content-length'] = String(Buffer.byteLength(init.body));
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const attempt = (retried: boolean): Promise<IncomingMessage> =>
      new Promise<IncomingMessage>((resolve, reject) => {
        const req = send(url, {
          method: init.method,
          headers,
          agent: agentFor(url.protocol, init.method.toUpperCase()),
          ...(init.signal ? { signal: init.signal } : {}),
        });
        req.on('response', resolve);
        req.on('error', (err) => {
          if (!retried && staleConnection(req, err, init.body)) resolve(attempt(true));
          else reject(err);
        });
        req.end(init.body);
      });
    return attempt(false);
  };
  /** fetch over `request`: the same sockets, and the same second attempt on a stale connection. */
  const fetchImpl: FetchLike = async (input, init = {}) => {
    const url = new URL(input);
    const body = init.body;
    if ((body !== undefined && body !== null && typeof body !== 'string') || !(url.protocol in agents)) {
      // Global fetch would bypass the checked lookup; the SDK transports never send anything else.
      throw new TypeError(`unsupported upstream request: ${url.protocol} with a non-string body`);
    }
    const method = (init.method ?? 'GET').toUpperCase();
    const res = await request(url, {
      method,
      headers: Object.fromEntries(new Headers(init.headers).entries()),
      ...(typeof body === 'string' ? { body } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
    });
    const status = res.statusCode ?? 502;
    const stream = NULL_BODY.has(status) || method === 'HEAD' ? null : Readable.toWeb(res);
    if (!stream) res.resume();
    return new Response(stream as ReadableStream<Uint8Array> | null, {
      status,
      statusText: res.statusMessage ?? '',
      headers: toHeaders(res),
    });
  };
  return {
    fetch: fetchImpl,
    request,
    close() {
      for (const agent of [agents, streamAgents]) {
        agent['http:'].destroy();
        agent['https:'].destroy();
      }
    },
  };
}
