import { isUtf8 } from 'node:buffer';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { envelopeB } from '../lib/envelope-b.js';
import { AppError, type ErrorCode, invalid, STATUS_BY_CODE } from '../lib/errors.js';
import { bodyJsonProblem, MAX_BODY_DEPTH } from '../lib/json.js';
import { isStoreOutage } from '../storage/db.js';
import { isForeignKeyViolation } from '../storage/errors.js';

/**
 * The longest path parameter the router matches (decoded, in UTF-16 units). Above every stored name
 * (tool names are at most 200 characters) so each one stays reachable; longer answers 400.
 */
export const MAX_PARAM_LENGTH = 1024;

export function sendError(reply: FastifyReply, code: ErrorCode, message: string): FastifyReply {
  return reply.code(STATUS_BY_CODE[code]).type('application/json').send({ error: { code, message } });
}

/**
 * Names the offending field before TypeBox's message: "body/name Expected string length less or equal
 * to 100", "body/mode must be one of: auto, chat, compile" (lib/schemas.ts words the messages).
 */
function validationMessage(err: FastifyError): string {
  const first = err.validation?.[0];
  if (!first) return err.message;
  const context = err.validationContext ?? 'request';
  const missing = (first.params as { missingProperty?: string } | undefined)?.missingProperty;
  if (first.keyword === 'required' && missing) {
    const parent = first.instancePath ? `${context}${first.instancePath}` : context;
    return `${parent}/${missing} is required`;
  }
  return `${context}${first.instancePath} ${first.message ?? 'is invalid'}`;
}

/** Maps Fastify's own client errors onto the error table. */
function fromFastify(err: FastifyError): { code: ErrorCode; message: string } | null {
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { code: 'unsupported_media_type', message: 'Content-Type must be application/json' };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { code: 'payload_too_large', message: 'Request body is larger than the limit of 1 MiB' };
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return { code: 'validation_failed', message: 'Content-Length does not match the body' };
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { code: 'invalid_json', message: `Request body is not valid JSON: ${err.message}` };
  }
  if (err instanceof SyntaxError || (err as { type?: string }).type === 'entity.parse.failed') {
    return { code: 'invalid_json', message: `Request body is not valid JSON: ${err.message}` };
  }
  const status = err.statusCode ?? 500;
  if (status === 413) return { code: 'payload_too_large', message: err.message };
  if (status === 415) return { code: 'unsupported_media_type', message: err.message };
  if (status === 405) return { code: 'method_not_allowed', message: err.message };
  if (status >= 400 && status < 500) return { code: 'validation_failed', message: err.message };
  return null;
}

/** The API's error handler: every error in envelope A (SPEC section 2). */
export function errorHandlerA(
  err: FastifyError | AppError,
  request: FastifyRequest,
  reply: FastifyReply,
): FastifyReply {
  if (err instanceof AppError) {
    if (err.headers) reply.headers(err.headers);
    return sendError(reply, err.code, err.message);
  }
  if (err.validation) return sendError(reply, 'validation_failed', validationMessage(err));
  const mapped = fromFastify(err);
  if (mapped) return sendError(reply, mapped.code, mapped.message);
  // A write referring to a row deleted meanwhile (its organization or project went after the
  // request's access was checked): what the request acts on is not found, not a server error.
  if (isForeignKeyViolation(err)) {
    request.log.warn({ err }, 'a write referred to a row deleted meanwhile');
    return sendError(reply, 'not_found', 'What this request refers to was deleted meanwhile');
  }
  // The database is unreachable or too slow (storage/db.ts): the client may retry, as for a
  // validation that could not be recorded.
  if (isStoreOutage(err)) {
    request.log.error({ err }, 'the store did not answer');
    return sendError(reply, 'service_unavailable', 'The store is not answering; retry');
  }
  request.log.error({ err }, 'unhandled error');
  return sendError(reply, 'internal_error', `Internal error (request ${request.id})`);
}

/**
 * Fastify's `frameworkErrors`: errors of the router itself (a bad percent-encoding, an over-long
 * parameter) reach no route and no plugin's handler, so they are answered here, in envelope B under
 * the payment gateway's prefix and in envelope A everywhere else.
 */
export function frameworkErrors(docsUrl: string) {
  return (err: FastifyError, request: FastifyRequest, reply: FastifyReply): void => {
    // No route matched, so no hook runs: the request id header is set here.
    reply.header('x-request-id', request.id);
    const message =
      err.code === 'FST_ERR_BAD_URL'
        ? 'The path is not valid percent-encoded UTF-8'
        : err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? `A path parameter is longer than ${MAX_PARAM_LENGTH} characters`
          : null;
    if (message === null) request.log.error({ err }, 'unhandled framework error');
    if (/^\/v1\/gateway(\/|\?|$)/.test(request.url)) {
      const status = message === null ? 500 : 400;
      reply
        .code(status)
        .type('application/json')
        .send(
          envelopeB(docsUrl, request.id, {
            type: message === null ? 'api_error' : 'invalid_request',
            code: message === null ? 'internal_server_error' : 'invalid_request',
            message: message ?? `Internal error (request ${request.id})`,
            param: message === null ? null : 'path',
          }),
        );
      return;
    }
    if (message === null) sendError(reply, 'internal_error', `Internal error (request ${request.id})`);
    else sendError(reply, 'validation_failed', message);
  };
}

/**
 * Fastify's `clientErrorHandler`: a request Node's HTTP parser refuses (malformed request line or
 * headers, headers over the limit, a request that timed out) never reaches a route; it is answered
 * in the envelope too, and the connection closed as Node does.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Duplex): void {
  // A reset connection has nobody to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [code, message]: [ErrorCode, string] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? ['headers_too_large', 'Request headers are larger than the limit of 16 KiB']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? ['request_timeout', 'The request was not received in time']
        : ['validation_failed', 'Malformed HTTP request'];
  const status = STATUS_BY_CODE[code];
  const body = JSON.stringify({ error: { code, message } });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/** `closing` says whether the server is stopping: requests that still arrive are then refused. */
export function registerErrorHandling(app: FastifyInstance, closing: () => boolean): void {
  // Empty JSON bodies on body-less POSTs (revoke, activate) are common in clients; treat as no body.
  const defaultJson = app.getDefaultJsonParser('error', 'error');
  // The API speaks JSON only; any other body type answers 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, raw, done) => {
    const buf = raw as Buffer;
    // Node would decode bad bytes to U+FFFD silently: a body must be UTF-8 (RFC 8259), or it is refused.
    if (!isUtf8(buf)) return done(new AppError('invalid_json', 'Request body is not valid UTF-8'));
    const body = buf.toString('utf8');
    if (body.trim() === '') return done(null, undefined);
    try {
      defaultJson(req, body, (err, value) => {
        if (err) return done(new AppError('invalid_json', `Request body is not valid JSON: ${err.message}`));
        // Before any handler or schema walks the body: one bound for depth, numbers and strings. A
        // body that is an array (a batch of bodies) has one level more, so each item gets the bound.
        const problem = bodyJsonProblem(value, Array.isArray(value) ? MAX_BODY_DEPTH + 1 : MAX_BODY_DEPTH);
        done(problem ? invalid(problem) : null, problem ? undefined : value);
      });
    } catch (err) {
      done(new AppError('invalid_json', `Request body is not valid JSON: ${(err as Error).message}`));
    }
  });

  // One hook, first of all, on every request. Once the server is stopping, a request that still
  // arrives is refused in the route's envelope (Fastify's own 503 while closing is not; it adds
  // `Connection: close`). The body's strings may not hold U+0000 (bodyJsonProblem); nor may the path
  // or query, where it would reach a PostgreSQL query as a name or id (a raw NUL never gets past
  // Node's HTTP parser).
  app.addHook('onRequest', (req, _reply, done) => {
    if (closing()) return done(new AppError('service_unavailable', 'The service is shutting down; retry'));
    done(
      req.url.includes('%00')
        ? invalid('The URL contains %00 (U+0000), which no name, id or value may hold')
        : undefined,
    );
  });

  app.setErrorHandler(errorHandlerA);

  app.setNotFoundHandler((request, reply) =>
    sendError(reply, 'not_found', `Route ${request.method} ${request.url.split('?')[0]} not found`),
  );
}
