import { isUtf8 } from 'node:buffer';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { bodyJsonProblem, MAX_BODY_DEPTH } from '../../lib/json.js';

/** JSON-RPC error codes of the MCP endpoints (spec section 7 plus the standard JSON-RPC ones). */
export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  policyDenied: -32001,
  approvalRequired: -32002,
} as const;

export type RpcId = string | number;
export type Params = Record<string, unknown>;

export interface RpcRequest {
  jsonrpc: '2.0';
  id: RpcId;
  method: string;
  params?: Params;
}

export interface RpcNotification {
  jsonrpc: '2.0';
  method: string;
  params?: Params;
}

/** A client's answer to a server request. */
export interface RpcReply {
  jsonrpc: '2.0';
  id: RpcId;
  result?: unknown;
  error?: unknown;
}

export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

export type RpcResponse =
  | { jsonrpc: '2.0'; id: RpcId | null; result: unknown }
  | { jsonrpc: '2.0'; id: RpcId | null; error: RpcError };

export type Incoming =
  | { kind: 'request'; message: RpcRequest }
  /** Notifications and responses to server requests: relayed, nothing to answer. */
  | { kind: 'notification'; message: RpcNotification }
  | { kind: 'response'; message: RpcReply }
  | { kind: 'invalid'; code: number; id: RpcId | null; message: string };

/** Marks a body that was not JSON, so the route can answer -32700 instead of the API's envelope. */
export const UNPARSABLE = Symbol('unparsable');

export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A string, or an integer that JSON.parse read exactly: a larger one arrives rounded, so its answer
 * would carry another id than the client sent, and two such ids could be taken for one.
 */
const validId = (v: unknown): v is RpcId =>
  typeof v === 'string' || (typeof v === 'number' && Number.isSafeInteger(v));

/** A JSON body past the limits of lib/json.ts: an invalid request, answered with its id when it has one. */
export class OutOfLimits {
  constructor(
    readonly id: RpcId | null,
    readonly problem: string,
  ) {}
}

/** Sorts one HTTP body into a request to answer, a message to accept, or an invalid message. */
export function classify(body: unknown): Incoming {
  if (body instanceof OutOfLimits) {
    return {
      kind: 'invalid',
      code: RPC.invalidRequest,
      id: body.id,
      message: `Invalid Request: ${body.problem}`,
    };
  }
  if (body === UNPARSABLE)
    return {
      kind: 'invalid',
      code: RPC.parseError,
      id: null,
      message: 'Parse error: body is not valid JSON',
    };
  if (Array.isArray(body)) {
    return {
      kind: 'invalid',
      code: RPC.invalidRequest,
      id: null,
      message: 'Invalid Request: JSON-RPC batches are not supported',
    };
  }
  if (!isObject(body))
    return {
      kind: 'invalid',
      code: RPC.invalidRequest,
      id: null,
      message: 'Invalid Request: expected a JSON-RPC object',
    };
  const id = validId(body.id) ? body.id : null;
  const bad = (message: string): Incoming => ({
    kind: 'invalid',
    code: RPC.invalidRequest,
    id,
    message: `Invalid Request: ${message}`,
  });
  if (body.jsonrpc !== '2.0') return bad('jsonrpc must be "2.0"');
  if ('method' in body) {
    if (typeof body.method !== 'string' || body.method === '')
      return bad('method must be a non-empty string');
    if (body.params !== undefined && !isObject(body.params)) return bad('params must be an object');
    if (!('id' in body)) return { kind: 'notification', message: body as unknown as RpcNotification };
    if (!validId(body.id)) return bad('id must be a string or an integer from -(2^53-1) to 2^53-1');
    return { kind: 'request', message: body as unknown as RpcRequest };
  }
  if (validId(body.id) && ('result' in body || 'error' in body))
    return { kind: 'response', message: body as unknown as RpcReply };
  return bad('method is required');
}

export const rpcResult = (id: RpcId | null, result: unknown): RpcResponse => ({ jsonrpc: '2.0', id, result });

export const rpcError = (id: RpcId | null, code: number, message: string, data?: unknown): RpcResponse => ({
  jsonrpc: '2.0',
  id,
  error: data === undefined ? { code, message } : { code, message, data },
});

/** Whether the client takes an SSE stream as the answer to a POST (MCP clients list both types). */
export function acceptsSse(accept: string | undefined): boolean {
  return !!accept && accept.toLowerCase().includes('text/event-stream');
}

/** Streamable HTTP: answer as an SSE stream only for a client that accepts SSE but not JSON. */
export function wantsSse(accept: string | undefined): boolean {
  if (!accept) return false;
  const a = accept.toLowerCase();
  return a.includes('text/event-stream') && !a.includes('application/json') && !a.includes('*/*');
}

export function sendRpc(
  reply: FastifyReply,
  message: RpcResponse,
  sse: boolean,
  status = 200,
  /** The event's id, asked for only when the answer goes as SSE (a one-event stream). */
  eventId?: () => string,
): FastifyReply {
  const json = JSON.stringify(message);
  if (sse && status === 200) {
    const id = eventId ? `id: ${eventId()}\n` : '';
    return reply
      .code(200)
      .header('content-type', 'text/event-stream')
      .header('cache-control', 'no-cache')
      .send(`${id}event: message\ndata: ${json}\n\n`);
  }
  return reply.code(status).header('content-type', 'application/json; charset=utf-8').send(json);
}

/** The protocol version to answer an initialize with: the client's, when this SDK speaks it. */
export function negotiateVersion(params: Params | undefined): string {
  const asked = params?.protocolVersion;
  return typeof asked === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(asked)
    ? asked
    : LATEST_PROTOCOL_VERSION;
}

/**
 * The default parser refuses a `__proto__` or `constructor.prototype` key with the same error as a
 * body that is not JSON. Valid JSON apart from such a key is a message past the body limits: an
 * invalid request, answered with its id. Reading the id from a plain JSON.parse is safe: it keeps
 * such a key as an own property (it never sets a prototype), only an own top-level `id` is read,
 * and the parsed body is then dropped, so nothing downstream ever holds the key. A body that is
 * not UTF-8 is refused the same way (`problem` says why), its id read from the text as decoded.
 */
function refusedOrUnparsable(
  body: string,
  problem = 'body has a __proto__ or constructor.prototype key',
): OutOfLimits | typeof UNPARSABLE {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return UNPARSABLE;
  }
  const id = isObject(value) && Object.hasOwn(value, 'id') && validId(value.id) ? value.id : null;
  return new OutOfLimits(id, problem);
}

/**
 * Replaces the JSON body parser of one encapsulated plugin: a body that is not JSON reaches the
 * handler as UNPARSABLE, so MCP clients get a JSON-RPC parse error rather than the REST envelope.
 */
export function useRpcBodyParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, raw, done) => {
    const buf = raw as Buffer;
    const body = buf.toString('utf8');
    // As every JSON body of the API: bytes that are not UTF-8 are refused, never read as U+FFFD
    // (the message checked and the one forwarded would hold characters the client never sent).
    if (!isUtf8(buf)) return done(null, refusedOrUnparsable(body, 'body is not valid UTF-8'));
    if (body.trim() === '') return done(null, undefined);
    try {
      parse(req, body, (err, value) => {
        if (err) return done(null, refusedOrUnparsable(body));
        // The limits of every JSON body (lib/json.ts), one level deeper for the `params` wrapper.
        const problem = bodyJsonProblem(value, MAX_BODY_DEPTH + 1);
        if (!problem) return done(null, value);
        done(null, new OutOfLimits(isObject(value) && validId(value.id) ? value.id : null, problem));
      });
    } catch {
      done(null, UNPARSABLE);
    }
  });
}
