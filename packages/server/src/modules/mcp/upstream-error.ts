import type { RpcError } from './jsonrpc.js';

/**
 * Why a call to an upstream did not produce a result. `rpc`: the upstream answered with a JSON-RPC
 * error (the connection is fine); `invalid`: it sent something past the gateway's bounds (size,
 * depth) or an answer that is not a valid JSON-RPC response with an object result; `cancelled`: the
 * client cancelled the request; the others: the connection is suspect.
 */
export class UpstreamError extends Error {
  constructor(
    readonly kind: 'refused' | 'unreachable' | 'timeout' | 'rpc' | 'invalid' | 'cancelled',
    message: string,
    readonly rpc?: RpcError,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'UpstreamError';
  }
}

/**
 * The SSE stream answering one POST ended before its response (Streamable HTTP): that call is
 * lost, not the session. The upstream may have died (its next request fails and ends the session),
 * or ended the stream on purpose (after a cancellation, or for the client to resume it).
 */
export class AnswerStreamEnded extends UpstreamError {
  constructor() {
    super('unreachable', 'the upstream answer stream ended before its response');
  }
}

/**
 * The answer to one POST cannot be used (not JSON, a content type that is neither JSON nor SSE, no
 * response in it, nested past the depth bound): that request fails, the session goes on.
 */
export class AnswerRefused extends UpstreamError {
  constructor(message: string) {
    super('invalid', message);
  }
}

/** The message of an answer that is not a valid JSON-RPC answer to its request. */
export const invalidAnswer = (problem: string): string => `upstream sent an invalid answer: ${problem}`;

/** The message of an upstream message past the size bound. */
export const tooLarge = (maxBytes: number): string => `upstream message larger than ${maxBytes} bytes`;

/** The message of an upstream message refused for its nesting. */
export const tooDeep = (maxDepth: number): string => `upstream message nested deeper than ${maxDepth} levels`;
