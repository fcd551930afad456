import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Envelope B, the error shape of the payment-authorization gateway and of its key set:
 * `{error: {type, code, message, param, doc_url, hint, request_id}}` plus the extra fields a code
 * carries (approval_id, payload_hash). `doc_url` names the code's page under the documentation address.
 */
export interface EnvelopeBError {
  type:
    | 'invalid_request'
    | 'authentication_error'
    | 'authorization_error'
    | 'conflict'
    | 'upstream_error'
    | 'api_error';
  code: string;
  message: string;
  param?: string | null;
  hint?: string | null;
  extra?: Record<string, unknown>;
  /** Response headers the answer carries (Retry-After of a rate-limited or in-flight payment). */
  headers?: Record<string, string>;
}

export function envelopeB(docsUrl: string, requestId: string, e: EnvelopeBError) {
  return {
    error: {
      type: e.type,
      code: e.code,
      message: e.message,
      param: e.param ?? null,
      doc_url: `${docsUrl}/errors/${e.code}`,
      hint: e.hint ?? null,
      request_id: requestId,
      ...e.extra,
    },
  };
}

export function sendEnvelopeB(
  req: FastifyRequest,
  reply: FastifyReply,
  docsUrl: string,
  status: number,
  e: EnvelopeBError,
): FastifyReply {
  if (e.headers) reply.headers(e.headers);
  return reply
    .code(status)
    .type('application/json')
    .send(envelopeB(docsUrl, req.id, e));
}
