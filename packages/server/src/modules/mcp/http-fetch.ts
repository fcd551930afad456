import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';

const NULL_BODY = new Set([101, 204, 205, 304]);

function toHeaders(res: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, value);
  }
  return headers;
}

/**
 * The fetch of the pooled upstream connections, on node:http(s) with keep-alive agents: undici's
 * fetch costs about 1 ms more CPU per request than node:http (see bench/gateway.ts), which is the
 * gateway's whole latency budget. It covers what the SDK transports send (string or no body,
 * headers, AbortSignal) and streams the answer (JSON or SSE). Redirects are returned, never
 * followed: the transports follow same-origin ones themselves. Anything else goes to global fetch.
 */
export function createHttpFetch(): { fetch: FetchLike; close(): void } {
  const agents = {
    'http:': new HttpAgent({ keepAlive: true }),
    'https:': new HttpsAgent({ keepAlive: true }),
  };
  const fetchImpl: FetchLike = (input, init = {}) => {
    const url = new URL(input);
    const body = init.body;
    if ((body !== undefined && body !== null && typeof body !== 'string') || !(url.protocol in agents)) {
      return fetch(input, init);
    }
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    if (typeof body === 'string') headers['content-length'] = String(Buffer.byteLength(body));
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise<Response>((resolve, reject) => {
      const req = send(
        url,
        {
          method,
          headers,
          agent: agents[url.protocol as 'http:' | 'https:'],
          ...(init.signal ? { signal: init.signal } : {}),
        },
        (res) => {
          const status = res.statusCode ?? 502;
          const stream = NULL_BODY.has(status) || method === 'HEAD' ? null : Readable.toWeb(res);
          if (!stream) res.resume();
          resolve(
            new Response(stream as ReadableStream<Uint8Array> | null, {
              status,
              statusText: res.statusMessage ?? '',
              headers: toHeaders(res),
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(typeof body === 'string' ? body : undefined);
    });
  };
  return {
    fetch: fetchImpl,
    close() {
      agents['http:'].destroy();
      agents['https:'].destroy();
    },
  };
}
