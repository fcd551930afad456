import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type EnvelopeBError, sendEnvelopeB } from '../../lib/envelope-b.js';
import { AppError } from '../../lib/errors.js';
import { HANDLER_B } from '../../plugins/openapi.js';
import { SigningKeyMissingError } from '../../signing/model.js';
import { isStoreOutage } from '../../storage/db.js';
import { isForeignKeyViolation } from '../../storage/errors.js';
import { GatewayError, gatewayError } from './model.js';

/** Routes whose body is a capsule consume: their validation failures are capsule_payload_invalid. */
const CAPSULE_BODY_ROUTES = new Set(['/v1/gateway/capsules/consume']);

const TYPE_BY_STATUS = (status: number): EnvelopeBError['type'] =>
  status === 401
    ? 'authentication_error'
    : status === 403
      ? 'authorization_error'
      : status === 409
        ? 'conflict'
        : status >= 500
          ? 'api_error'
          : 'invalid_request';

/** `body/amount_ceiling/amount` → `amount_ceiling.amount`: the member a validation failure names. */
function paramOf(err: FastifyError): string | null {
  const first = err.validation?.[0];
  if (!first) return null;
  const missing =
    (first.params as { missingProperty?: string; additionalProperty?: string } | undefined) ?? {};
  const path = [
    ...first.instancePath.split('/').filter(Boolean),
    ...(missing.missingProperty ? [missing.missingProperty] : []),
    ...(missing.additionalProperty ? [missing.additionalProperty] : []),
  ];
  return path.length > 0 ? path.join('.') : (err.validationContext ?? null);
}

/** The error handler answering in envelope B (the gateway's, also the key set's). */
export function envelopeBErrorHandler(docsUrl: string) {
  return (err: FastifyError | AppError | GatewayError, req: FastifyRequest, reply: FastifyReply) => {
    const send = (status: number, e: EnvelopeBError) => sendEnvelopeB(req, reply, docsUrl, status, e);
    if (err instanceof GatewayError) return send(err.status, err.body);
    if (err instanceof SigningKeyMissingError) {
      return send(503, {
        type: 'api_error',
        code: 'signing_key_missing',
        message: 'No Ed25519 signing key is available',
      });
    }
    if (err instanceof AppError) {
      if (err.headers) reply.headers(err.headers);
      const code = err.code === 'validation_failed' ? 'invalid_request' : err.code;
      return send(err.status, { type: TYPE_BY_STATUS(err.status), code, message: err.message });
    }
    if (err.validation) {
      const first = err.validation[0];
      const message = `${paramOf(err) ?? 'request'} ${first?.message ?? 'is invalid'}`;
      const code =
        err.validationContext === 'body' && CAPSULE_BODY_ROUTES.has(req.routeOptions.url ?? '')
          ? 'capsule_payload_invalid'
          : 'invalid_request';
      return send(400, { type: 'invalid_request', code, message, param: paramOf(err) });
    }
    switch (err.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return send(413, {
          type: 'invalid_request',
          code: 'payload_too_large',
          message: `Request body is larger than ${(req.routeOptions.bodyLimit ?? 512 * 1024) / 1024} KB`,
        });
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return send(415, {
          type: 'invalid_request',
          code: 'unsupported_media_type',
          message:
            req.routeOptions.url === '/v1/gateway/invoices'
              ? 'Content-Type must be application/json or application/xml'
              : 'Content-Type must be application/json',
        });
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return send(400, {
          type: 'invalid_request',
          code: 'invalid_json',
          message: `Request body is not valid JSON: ${err.message}`,
        });
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return send(status, { type: 'invalid_request', code: 'invalid_request', message: err.message });
    }
    // A write referring to a row deleted meanwhile (its organization or project went after the
    // request's access was checked): what it acts on is not found, as in envelope A, not a server error.
    if (isForeignKeyViolation(err)) {
      req.log.warn({ err }, 'a write referred to a row deleted meanwhile');
      const gone = HANDLER_B.resourceNotFound;
      return send(gone.status, {
        type: gone.type,
        code: gone.code,
        message: 'What this request refers to was deleted meanwhile',
        hint: 'its organization, project or another record it names was deleted while it ran',
      });
    }
    if (isStoreOutage(err)) {
      req.log.error({ err }, 'the store did not answer');
      return send(503, gatewayError.unavailable('The store is not answering; retry').body);
    }
    req.log.error({ err }, 'unhandled error');
    return send(500, {
      type: 'api_error',
      code: 'internal_server_error',
      message: `Internal error (request ${req.id})`,
      hint: 'quote request_id when reporting it',
    });
  };
}

/** 404 `route_not_found` in envelope B: a path or method that has no route. */
export function routeNotFoundB(docsUrl: string) {
  return (req: FastifyRequest, reply: FastifyReply) =>
    sendEnvelopeB(req, reply, docsUrl, 404, {
      type: 'invalid_request',
      code: 'route_not_found',
      message: `Route ${req.method} ${req.url.split('?')[0]} not found`,
    });
}

/** Every non-2xx answer under the gateway's prefix in envelope B. */
export function registerEnvelopeB(app: FastifyInstance, docsUrl: string): void {
  app.setErrorHandler(envelopeBErrorHandler(docsUrl));
  app.setNotFoundHandler(routeNotFoundB(docsUrl));
}
