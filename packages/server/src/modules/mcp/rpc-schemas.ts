import { Type } from '@sinclair/typebox';
import { Nullable } from '../../lib/schemas.js';
import { type DocumentedOnly, errorResponse } from '../../plugins/openapi.js';

/*
 * The MCP endpoints in the API document. Documented only (`schema.documented`), never validated: a
 * malformed JSON-RPC message must get a JSON-RPC error (-32700, -32600) as MCP requires, not a 400
 * of the REST API, and its answers are written as JSON-RPC text or SSE, not serialized.
 */

const JsonRpc = Type.Literal('2.0');
const Id = Type.Union([Type.String(), Type.Integer()], { description: 'A string or an integer' });
const Params = Type.Optional(Type.Record(Type.String(), Type.Unknown()));

const Request = Type.Object(
  { jsonrpc: JsonRpc, id: Id, method: Type.String({ minLength: 1 }), params: Params },
  {
    title: 'Request',
    description: 'Answered with a JSON-RPC response; `tools/call` is decided by the policies first.',
  },
);
const Notification = Type.Object(
  { jsonrpc: JsonRpc, method: Type.String({ minLength: 1 }), params: Params },
  { title: 'Notification', description: 'No id: accepted with 202 and no body.' },
);
const Reply = Type.Object(
  { jsonrpc: JsonRpc, id: Id, result: Type.Optional(Type.Unknown()), error: Type.Optional(Type.Unknown()) },
  {
    title: 'Response',
    description: 'The client answering a request of the server (result or error): accepted with 202.',
  },
);

/** One JSON-RPC 2.0 message per POST. */
export const RpcMessage = Type.Union([Request, Notification, Reply], {
  description: 'One JSON-RPC 2.0 message (batches are refused with -32600).',
});

const RpcErrorObject = Type.Object({
  code: Type.Integer(),
  message: Type.String(),
  data: Type.Optional(Type.Unknown()),
});

const RpcAnswer = Type.Union([
  Type.Object({ jsonrpc: JsonRpc, id: Nullable(Id), result: Type.Unknown() }, { title: 'Result' }),
  Type.Object({ jsonrpc: JsonRpc, id: Nullable(Id), error: RpcErrorObject }, { title: 'Error' }),
]);

const MalformedMessage = Type.Object(
  { jsonrpc: JsonRpc, id: Nullable(Id), error: RpcErrorObject },
  {
    description:
      'A malformed message, answered in JSON-RPC: -32700 (not JSON) or -32600 (not one JSON-RPC message, or past the size and depth limits of a body).',
  },
);

const Accepted = Type.Null({ description: 'A notification or a response was accepted; no body.' });

const SessionId = Type.String({ description: 'The gateway session (`Mcp-Session-Id`)' });

/** An answer as JSON or, for clients that ask for it (or when messages come first), as an SSE stream. */
const answered = (description: string, headers?: Record<string, unknown>) => ({
  description,
  ...(headers ? { headers } : {}),
  content: {
    'application/json': { schema: RpcAnswer },
    'text/event-stream': {
      schema: Type.String({
        description: 'SSE: `event: message` frames, each one JSON-RPC message, the answer last.',
      }),
    },
  },
});

/** POST /v1/mcp/:upstreamSlug. */
export const GatewayPost: DocumentedOnly = {
  body: RpcMessage,
  headers: Type.Object({
    'mcp-session-id': Type.Optional(
      Type.String({ description: 'The session to speak in; none for `initialize` or session-less use.' }),
    ),
  }),
  response: {
    200: answered(
      'The JSON-RPC answer, as JSON, or as SSE to a client that accepts only text/event-stream or when the upstream sends messages before its answer.',
      { 'mcp-session-id': { description: 'The new session (answer to `initialize`)', schema: SessionId } },
    ),
    202: Accepted,
    400: MalformedMessage,
  },
};

/** GET /v1/mcp/:upstreamSlug. */
export const GatewayStream: DocumentedOnly = {
  headers: Type.Object({
    'mcp-session-id': Type.Optional(
      Type.String({ description: "The session whose stream this is; none for the key's decision feed." }),
    ),
  }),
  response: {
    200: {
      description:
        "The server-to-client stream (SSE). With a session: `notifications/session`, the upstream's messages and `event: decision` envelopes of the session's calls; without: every decision of the key on this upstream. `:ping` every 15 s; ends when the key or the upstream is no longer valid.",
      content: { 'text/event-stream': { schema: Type.String() } },
    },
    409: { ...errorResponse(409), description: 'The session has its maximum of open streams: conflict' },
  },
};

/** DELETE /v1/mcp/:upstreamSlug. */
export const GatewayEnd: DocumentedOnly = {
  headers: Type.Object({ 'mcp-session-id': Type.String({ description: 'The session to end (required).' }) }),
};

/** POST /v1/mcp/charter: stateless, no sessions. */
export const CharterPost: DocumentedOnly = {
  body: RpcMessage,
  response: {
    200: answered(
      'The JSON-RPC answer (`initialize`, `tools/list`, `tools/call` of the five Charter tools), as JSON or SSE.',
    ),
    202: Accepted,
    400: MalformedMessage,
  },
};
