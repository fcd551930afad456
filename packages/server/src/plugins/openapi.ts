import { createRequire } from 'node:module';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { type TSchema, Type } from '@sinclair/typebox';
import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  FastifySchema,
  RouteOptions,
} from 'fastify';
import { type Config, docsPathOf } from '../config.js';
import type { EnvelopeBError } from '../lib/envelope-b.js';
import { type ErrorCode, STATUS_BY_CODE } from '../lib/errors.js';
import { OPTIONAL_BODY } from '../lib/schemas.js';
import type { AuthMode } from './auth.js';
import { errorHandlerA, sendError } from './errors.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/**
 * What a route documents without declaring it to Fastify (see `FastifySchema.documented`). A body or
 * query given here is what the document shows, in place of the route's own schema.
 */
export interface DocumentedOnly {
  /** A schema, or `{content: {mediaType: {schema}}}` for a body taken in several media types. */
  body?: TSchema | { content: Record<string, { schema: TSchema }> };
  /** Header parameters added to the route's own (an object schema). */
  headers?: TSchema;
  /** The query as clients send it, where the handler checks what the route's schema leaves a string. */
  querystring?: TSchema;
  /** By status, as `schema.response`; a schema may list `content` by media type. */
  response?: Record<string, TSchema | Record<string, unknown>>;
  /** Codes of the error table (envelope A) the route answers beyond the standard ones of its declarations. */
  errors?: readonly ErrorCode[];
  /**
   * The route answers every error in envelope B (the payment gateway's, the key set's): the codes it
   * answers beyond the standard ones of its auth mode, inputs and method. Present, even empty, means B.
   */
  envelopeB?: readonly ErrorB[];
}

/** One code of envelope B: its status, its `type`, and the members it adds to the envelope. */
export interface CodeB {
  status: number;
  code: string;
  type: EnvelopeBError['type'];
  extra?: readonly string[];
  /** Response headers it sets (`retry-after`). */
  headers?: readonly string[];
}

/** A code of envelope B, or a factory of the gateway's catalogs (`gatewayError.expired`) that makes one. */
export type ErrorB = CodeB | ((...args: never[]) => { status: number; body: EnvelopeBError });

declare module 'fastify' {
  interface FastifySchema {
    /**
     * Described in /openapi.json, never validated or serialized. For what validation would break: the
     * JSON-RPC messages of the MCP endpoints (a malformed one gets a JSON-RPC error, not a 400 of the
     * API) and the bodies of actions that take none (`NoBody`, a body sent is ignored as always).
     */
    documented?: DocumentedOnly;
  }
}

const SECURITY_SCHEMES = {
  apiKey: {
    type: 'apiKey',
    in: 'header',
    name: 'X-Service-API-Key',
    description: 'A project API key (`svc_…`); `Authorization: Bearer svc_…` is accepted too.',
  },
  userToken: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'JWT',
    description:
      'A user token: HS256 with the server secret, or from the identity provider (SVC_JWT_JWKS_URL).',
  },
  adminToken: { type: 'http', scheme: 'bearer', description: 'The operator admin token (SVC_ADMIN_TOKEN).' },
  apiKeyQuery: {
    type: 'apiKey',
    in: 'query',
    name: 'apiKey',
    description: 'A project API key in the query, for clients that cannot set headers (EventSource).',
  },
} as const;

type Requirement = Record<string, string[]>[];

function security(mode: AuthMode, queryApiKey: boolean): Requirement {
  const key: Requirement = [{ apiKey: [] }, ...(queryApiKey ? [{ apiKeyQuery: [] }] : [])];
  switch (mode) {
    case 'none':
      return [];
    case 'admin':
      return [{ adminToken: [] }];
    case 'jwt':
      return [{ userToken: [] }];
    case 'apiKey':
      return key;
    default:
      return [...key, { userToken: [] }];
  }
}

const MiB = 1024 * 1024;

/** A body limit as the document states it: `512 KiB (524288 bytes)`. */
const sizeOf = (bytes: number) =>
  `${bytes % MiB === 0 ? `${bytes / MiB} MiB` : `${bytes / 1024} KiB`} (${bytes} bytes)`;

const WHY: Record<number, string> = {
  400: 'The request is invalid',
  401: 'Missing or invalid credentials',
  403: 'The credentials do not allow this',
  404: 'The resource does not exist or belongs to another organization',
  409: 'Conflicts with the current state',
  410: 'The approval expired',
  413: 'The body is larger than 1 MiB',
  415: 'The body is not JSON',
  429: 'A rate limit or a plan limit is reached',
  500: 'Internal error',
  502: 'The payment provider failed, or the invoice could not be parsed',
  503: 'The store (or Redis) is unavailable, or the server is shutting down; retry',
  504: 'The payment provider did not answer in time',
};

/** Envelope B's statuses where the gateway means more than the API's standard errors. */
const WHY_B: Record<number, string> = {
  403: 'Refused: by the credentials, or by a check of the payment',
  429: 'The payment provider is rate-limiting; back off',
  503: 'Not available now; retry (signing_key_missing and credentials_key_missing wait for the operator)',
};

/** The error envelope of one status, listing the codes the error table maps to it. */
export function errorResponse(status: number, why = WHY[status] ?? 'Error') {
  const codes = (Object.keys(STATUS_BY_CODE) as ErrorCode[]).filter((c) => STATUS_BY_CODE[c] === status);
  return {
    description: `${why}: ${codes.join(', ')}`,
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message'],
        properties: { code: { type: 'string', enum: codes }, message: { type: 'string' } },
      },
    },
  };
}

/** What one route's declarations say about it: the inputs and methods the standard errors follow from. */
function traitsOf(route: RouteOptions, schema: FastifySchema, mode: AuthMode) {
  const methods = ([] as string[]).concat(route.method);
  const hasBody = methods.some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH');
  const authed = mode !== 'none';
  return {
    hasBody,
    writes: hasBody || methods.includes('DELETE'),
    takesInput: hasBody || Boolean(schema.querystring || schema.params || route.url.includes(':')),
    authed,
    /** User tokens (and the dashboard's session) are accepted. */
    users: mode === 'any' || mode === 'jwt',
    keys: mode === 'any' || mode === 'apiKey',
  };
}

/** The standard errors a route can answer, from what it declares (auth mode, inputs, method). */
function errorStatuses(route: RouteOptions, schema: FastifySchema, mode: AuthMode): number[] {
  const { hasBody, writes, takesInput, authed } = traitsOf(route, schema, mode);
  const statuses = [
    takesInput && 400,
    authed && 401,
    authed && mode !== 'admin' && 403,
    (authed || route.url.includes(':')) && 404,
    authed && writes && 409,
    hasBody && 413,
    hasBody && 415,
    // Admin routes: too many refused admin tokens from one address (plugins/admin-throttle.ts).
    ((authed && hasBody) || mode === 'admin') && 429,
    500,
    503,
  ];
  return statuses.filter((s): s is number => s !== false);
}

/** The `type` of envelope B for a status, as the gateway's error handler gives it to a code of the error table. */
function typeB(status: number): EnvelopeBError['type'] {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'authorization_error';
  if (status === 409) return 'conflict';
  return status >= 500 ? 'api_error' : 'invalid_request';
}

/** A code of the error table as envelope B answers it (`validation_failed` is `invalid_request` there). */
export function tableCodeB(code: ErrorCode): CodeB {
  const status = STATUS_BY_CODE[code];
  return { status, code: code === 'validation_failed' ? 'invalid_request' : code, type: typeB(status) };
}

/** What envelope B's error handler (modules/payments/errors.ts) answers of its own. */
export const HANDLER_B = {
  invalidRequest: { status: 400, code: 'invalid_request', type: 'invalid_request' },
  invalidJson: { status: 400, code: 'invalid_json', type: 'invalid_request' },
  routeNotFound: { status: 404, code: 'route_not_found', type: 'invalid_request' },
  /** A write that refers to a row deleted meanwhile (a foreign key the store refuses). */
  resourceNotFound: { status: 404, code: 'resource_not_found', type: 'invalid_request' },
  payloadTooLarge: { status: 413, code: 'payload_too_large', type: 'invalid_request' },
  unsupportedMediaType: { status: 415, code: 'unsupported_media_type', type: 'invalid_request' },
  internal: { status: 500, code: 'internal_server_error', type: 'api_error' },
  signingKeyMissing: { status: 503, code: 'signing_key_missing', type: 'api_error' },
} as const satisfies Record<string, CodeB>;

function codeB(e: ErrorB): CodeB {
  if (typeof e !== 'function') return e;
  // A factory is called once with placeholders: what it makes names its status, type, members and headers.
  const { status, body } = (e as (...args: string[]) => { status: number; body: EnvelopeBError })(
    '1',
    '1',
    '1',
  );
  const extra = Object.keys(body.extra ?? {});
  const headers = Object.keys(body.headers ?? {});
  return {
    status,
    code: body.code,
    type: body.type,
    ...(extra.length > 0 ? { extra } : {}),
    ...(headers.length > 0 ? { headers } : {}),
  };
}

/** The envelope-B errors every such route can answer, from what it declares (auth mode, inputs, method). */
function standardB(route: RouteOptions, schema: FastifySchema, mode: AuthMode): CodeB[] {
  const { hasBody, writes, takesInput, authed, users, keys } = traitsOf(route, schema, mode);
  const codes = [
    takesInput && HANDLER_B.invalidRequest,
    hasBody && HANDLER_B.invalidJson,
    // A user token names the organization it acts in (X-Organization-Id).
    users && tableCodeB('missing_organization'),
    authed && tableCodeB('unauthorized'),
    keys && tableCodeB('invalid_api_key'),
    authed && tableCodeB('authorization_error'),
    // Its organization, project or another row it refers to deleted after access was checked.
    authed && writes && HANDLER_B.resourceNotFound,
    users && writes && tableCodeB('csrf_failed'),
    hasBody && HANDLER_B.payloadTooLarge,
    hasBody && HANDLER_B.unsupportedMediaType,
    HANDLER_B.internal,
    // The store did not answer in time (storage/db.ts), or the identity provider's key set could not
    // be fetched to check a user token.
    tableCodeB('service_unavailable'),
  ];
  return codes.filter((c): c is CodeB => c !== false);
}

/** Members of envelope B, as every answer carries them. */
const ENVELOPE_B_MEMBERS = {
  type: { type: 'string', description: 'The class of the error' },
  code: { type: 'string' },
  message: { type: 'string' },
  param: {
    type: ['string', 'null'],
    description: 'The member at fault, dotted (`amount_ceiling.amount`), a header or parameter name, or null',
  },
  doc_url: { type: 'string', description: 'The documentation of the code: `SVC_DOCS_URL/errors/<code>`' },
  hint: { type: ['string', 'null'], description: 'What to do next, or null' },
  request_id: { type: 'string', description: 'The request id (`X-Request-Id`)' },
};

/** Envelope B with any code: the shape of every error of the gateway and the key set (components). */
const ENVELOPE_B = {
  description:
    'Envelope B: every non-2xx answer under /v1/gateway and of /.well-known/svc-keys.json, also their ' +
    '404 route_not_found (an unknown path under /v1/gateway, another method on the key set). Codes may add ' +
    'members (approval_id, payload_hash, invoice_id, invoice_hash).',
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: Object.keys(ENVELOPE_B_MEMBERS),
      properties: ENVELOPE_B_MEMBERS,
    },
  },
};

/** The envelope-B answer of one status: the codes a route answers with it, their types, members and headers. */
function errorResponseB(codes: CodeB[], why: string) {
  const extra = [...new Set(codes.flatMap((c) => c.extra ?? []))];
  const carriedBy = (member: string) => codes.filter((c) => c.extra?.includes(member)).map((c) => c.code);
  const retrying = codes.filter((c) => c.headers?.includes('retry-after')).map((c) => c.code);
  return {
    description: `${why}: ${codes.map((c) => c.code).join(', ')}`,
    ...(retrying.length > 0
      ? {
          headers: {
            'Retry-After': {
              type: 'string',
              description: `When to try again, in seconds or as an HTTP date (with ${retrying.join(', ')})`,
            },
          },
        }
      : {}),
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: Object.keys(ENVELOPE_B_MEMBERS),
        properties: {
          ...ENVELOPE_B_MEMBERS,
          type: { ...ENVELOPE_B_MEMBERS.type, enum: [...new Set(codes.map((c) => c.type))] },
          code: { type: 'string', enum: codes.map((c) => c.code) },
          ...Object.fromEntries(
            extra.map((m) => [m, { type: 'string', description: `With ${carriedBy(m).join(', ')}` }]),
          ),
        },
      },
    },
  };
}

/** Envelope-B answers by status: the standard codes of the route, then its own (each code once). */
function responsesB(
  route: RouteOptions,
  schema: FastifySchema,
  mode: AuthMode,
  own: readonly ErrorB[],
  why: Record<number, string>,
) {
  const byStatus = new Map<number, CodeB[]>();
  const seen = new Set<string>();
  for (const c of [...standardB(route, schema, mode), ...own.map(codeB)]) {
    if (seen.has(c.code)) continue;
    seen.add(c.code);
    byStatus.set(c.status, [...(byStatus.get(c.status) ?? []), c]);
  }
  return new Map(
    [...byStatus]
      .sort(([a], [b]) => a - b)
      .map(([status, codes]) => [status, errorResponseB(codes, why[status] ?? 'Error')]),
  );
}

function tagOf(url: string): string {
  const [first, second] = url.split('/').filter(Boolean);
  if (first === 'healthz' || first === 'readyz') return 'health';
  if (first === 'metrics' || first === 'openapi.json') return 'operations';
  if (first === 'ws') return 'events';
  return first === 'v1' && second ? second : (first ?? 'service');
}

/**
 * Routes a user token calls without X-Organization-Id: its own organizations (or one named in the
 * path), its sign-in session, and a project read by id (the project names its organization).
 */
const NO_ORGANIZATION_HEADER = [
  /^[A-Z]+ \/v1\/organizations(\/|$)/,
  /^[A-Z]+ \/v1\/auth\//,
  /^GET \/v1\/projects\/:id$/,
];

const ORGANIZATION_HEADER = {
  type: 'string',
  minLength: 1,
  description:
    'With a user token: the organization the call acts in (the user must be a member), unless the query ' +
    'or body names it (`organizationId`); without either the answer is 400 missing_organization. An API ' +
    'key acts in its own organization and needs none.',
};

const RATE_LIMIT_HEADERS = {
  'X-RateLimit-Limit': { type: 'integer', description: 'Calls the API key may make in the current window' },
  'X-RateLimit-Remaining': { type: 'integer', description: 'Calls left in the current window' },
  'X-RateLimit-Reset': { type: 'integer', description: 'When the window ends (Unix time, seconds)' },
};

const RETRY_AFTER = { type: 'integer', description: 'Seconds until a call may succeed again' };

const propertiesOf = (schema: unknown) =>
  (schema as { properties?: Record<string, unknown> }).properties ?? {};

/** Adds header parameters to a route's header schema (an object schema, or none). */
function withHeaders(schema: unknown, add: Record<string, unknown>): TSchema {
  const base = (schema ?? { type: 'object', properties: {} }) as TSchema;
  return { ...base, type: 'object', properties: { ...propertiesOf(base), ...add } };
}

/**
 * A route schema whose document answers every error in envelope B, with what `more` adds to what the
 * route documents itself: codes, and header parameters (for a plugin that answers them on every route).
 */
export function withEnvelopeB(
  schema: FastifySchema | undefined,
  more: Pick<DocumentedOnly, 'envelopeB' | 'headers'> = {},
): FastifySchema {
  const documented = schema?.documented ?? {};
  const headers = more.headers
    ? withHeaders(documented.headers, propertiesOf(more.headers))
    : documented.headers;
  return {
    ...schema,
    documented: {
      ...documented,
      ...(headers ? { headers } : {}),
      envelopeB: [...(documented.envelopeB ?? []), ...(more.envelopeB ?? [])],
    },
  };
}

/**
 * Documents a route from what it already declares: its schemas, its auth mode (security) and the
 * standard errors of the one error table, or of envelope B where the route answers in it. Only the
 * document changes; the route's own validation and serialization stay as declared.
 */
function documentRoute(defaultBodyLimit: number) {
  return ({ schema, url, route }: { schema: FastifySchema; url: string; route: RouteOptions }) => {
    const { documented, ...own } = (schema ?? {}) as FastifySchema & {
      response?: Record<string, unknown>;
      tags?: string[];
    };
    const mode: AuthMode = route.config?.auth ?? 'any';
    const why: Record<number, string> = {
      ...WHY,
      ...(documented?.envelopeB ? WHY_B : {}),
      413: `The body is larger than ${sizeOf(route.bodyLimit ?? defaultBodyLimit)}`,
    };
    const media = Object.keys((documented?.body as { content?: object } | undefined)?.content ?? {});
    if (media.length > 0) why[415] = `The body is not ${media.join(', ')}`;
    if (mode === 'admin') why[429] = 'Too many refused admin authentications from this address';
    // Every route declares its success (the API document test holds it to that): no generic 2xx.
    const response: Record<string, unknown> = { ...own.response, ...documented?.response };
    const standard = documented?.envelopeB
      ? responsesB(route, own, mode, documented.envelopeB, why)
      : new Map(
          [
            ...new Set([
              ...errorStatuses(route, own, mode),
              ...(documented?.errors ?? []).map((c) => STATUS_BY_CODE[c]),
            ]),
          ].map((status) => [status, errorResponse(status, why[status])]),
        );
    for (const [status, answer] of standard) {
      const mine = documented?.response?.[status] as { description?: string } | undefined;
      // A documented answer on a standard error status (a JSON-RPC error) is one of two possible bodies.
      response[status] = mine
        ? { description: `${mine.description ?? ''} Or ${answer.description}`, anyOf: [mine, answer] }
        : (response[status] ?? answer);
    }
    if (mode === 'admin' && response[429]) {
      response[429] = { ...(response[429] as object), headers: { 'Retry-After': RETRY_AFTER } };
    }
    if (route.config?.rateLimit) {
      // Counted once the caller is known (plugins/rate-limit.ts), after authentication: a refused
      // credential (401) carries none, and neither does a 403 of authentication (a user token or
      // session on a route for API keys, a key without the route's scope, csrf_failed). Where users
      // are taken too, or the route declares a 403 of its own, a 403 may come after counting (not a
      // member of the organization) and carry them.
      const forbidsAfterCounting =
        mode !== 'apiKey' ||
        documented?.response?.[403] !== undefined ||
        (documented?.errors ?? []).some((c) => STATUS_BY_CODE[c] === 403);
      for (const [status, answer] of Object.entries(response)) {
        if (status === '401' || (status === '403' && !forbidsAfterCounting)) continue;
        const headers =
          status === '429' ? { ...RATE_LIMIT_HEADERS, 'Retry-After': RETRY_AFTER } : RATE_LIMIT_HEADERS;
        response[status] = { ...(answer as object), headers };
      }
    }
    let headers = documented?.headers
      ? withHeaders(own.headers, propertiesOf(documented.headers))
      : own.headers;
    const methods = ([] as string[]).concat(route.method);
    if (
      traitsOf(route, own, mode).users &&
      !methods.every((m) => NO_ORGANIZATION_HEADER.some((re) => re.test(`${m} ${route.url}`)))
    ) {
      headers = withHeaders(headers, { 'X-Organization-Id': ORGANIZATION_HEADER });
    }
    return {
      url,
      schema: {
        ...own,
        ...(documented?.body ? { body: documented.body } : {}),
        ...(documented?.querystring ? { querystring: documented.querystring } : {}),
        ...(headers ? { headers } : {}),
        tags: own.tags ?? [tagOf(route.url)],
        security: security(mode, route.config?.queryApiKey === true),
        response,
      },
    };
  };
}

/**
 * The generator marks every request body required (Fastify needs one where it validates one); the
 * bodies marked optional (`NoBody`) are not.
 */
function optionalBodies({ openapiObject }: { openapiObject: Record<string, unknown> }) {
  const paths = (openapiObject.paths ?? {}) as Record<string, Record<string, Record<string, unknown>>>;
  for (const operation of Object.values(paths).flatMap((methods) => Object.values(methods))) {
    const body = operation.requestBody as
      | { required?: boolean; content?: Record<string, { schema?: Record<string, unknown> }> }
      | undefined;
    const schemas = Object.values(body?.content ?? {}).map((c) => c.schema ?? {});
    if (body && schemas.some((s) => s[OPTIONAL_BODY] === true)) {
      body.required = false;
      for (const s of schemas) delete s[OPTIONAL_BODY];
    }
  }
  return openapiObject;
}

/** One range-spec of RFC 9110 §14.1.1: `first-last`, `first-` or `-suffix`; an int-range whose last is below its first is invalid. */
function isByteRangeSpec(spec: string): boolean {
  const suffix = /^-\d+$/.test(spec);
  const int = /^(\d+)-(\d*)$/.exec(spec);
  const [, first = '', last = ''] = int ?? [];
  return suffix || (int !== null && (last === '' || BigInt(last) >= BigInt(first)));
}

/**
 * The Range header as the reference's assets honour it (RFC 9110 §14.2): on GET only (a server must
 * ignore it on any other method, HEAD included), and only a well-formed `bytes` ranges-specifier
 * (the unit is case-insensitive; OWS around commas and empty list elements are allowed). Anything
 * else is ignored: null, and the whole asset is sent. A valid one is returned in the plain form
 * @fastify/send reads (`bytes=0-9,-5`), which would otherwise answer a malformed one as unsatisfiable.
 */
export function honouredRange(method: string, range: string | undefined): string | null {
  if (method !== 'GET' || range === undefined) return null;
  const specifier = /^bytes=(.*)$/i.exec(range.trim());
  if (!specifier) return null;
  const specs = specifier[1]!
    .split(',')
    .map((s) => s.replace(/^[ \t]+|[ \t]+$/g, ''))
    .filter((s) => s !== '');
  return specs.length > 0 && specs.every(isByteRangeSpec) ? `bytes=${specs.join(',')}` : null;
}

/**
 * The reference's errors in envelope A, as the API's: a Range none of whose ranges overlaps the
 * asset answers 416 `range_not_satisfiable` with the Content-Range that gives the asset's size
 * (RFC 9110 §15.5.17), which @fastify/static hands on as a bare error without that header.
 */
function docsErrors(err: FastifyError, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (err.statusCode !== 416) return errorHandlerA(err, req, reply);
  const contentRange = (err as { headers?: Record<string, string> }).headers?.['Content-Range'];
  const size = /^bytes \*\/(\d+)$/.exec(contentRange ?? '')?.[1];
  if (size !== undefined) reply.header('content-range', `bytes */${size}`);
  return sendError(
    reply,
    'range_not_satisfiable',
    size === undefined
      ? 'No range of the Range header overlaps the file'
      : `No range of the Range header overlaps the file's ${size} bytes`,
  );
}

/**
 * GET /openapi.json (OpenAPI 3.1, generated from the route schemas) and the interactive reference
 * at the docs path, served from the installed package (no CDN). Register before the routes: the
 * generator collects them as they are added.
 */
export async function registerOpenApi(app: FastifyInstance, config: Config): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'svc',
        version,
        description:
          'Tool-call policy enforcement for AI agents. Errors come in one of two envelopes. Envelope A, ' +
          '`{error: {code, message}}`, is every non-2xx answer of the API except the two below (the MCP ' +
          'endpoints also answer JSON-RPC errors, as documented there). Envelope B, ' +
          '`{error: {type, code, message, param, doc_url, hint, request_id}}` (some codes add members such ' +
          'as approval_id and payload_hash), is every non-2xx answer of the payment-authorization gateway ' +
          '(/v1/gateway/*, unknown paths there included: 404 route_not_found) and of the key set ' +
          '(/.well-known/svc-keys.json; another method on it answers 404 route_not_found); its shape is ' +
          '`#/components/schemas/EnvelopeB`. Each operation lists the codes it can answer by status.',
      },
      servers: [{ url: config.baseUrl }],
      externalDocs: { description: 'API reference', url: config.docsUrl },
      components: { securitySchemes: SECURITY_SCHEMES, schemas: { EnvelopeB: ENVELOPE_B as never } },
    },
    transform: documentRoute(app.initialConfig.bodyLimit ?? MiB),
    transformObject: optionalBodies as never,
  });

  app.get(
    '/openapi.json',
    {
      config: { auth: 'none' },
      schema: {
        summary: 'This OpenAPI 3.1 document',
        response: {
          200: { description: 'The OpenAPI document', type: 'object', additionalProperties: true },
        },
      },
    },
    async (_req, reply) => reply.type('application/json').send(JSON.stringify(app.swagger())),
  );
}

/** Paths the reference serves under its prefix (swagger-ui's pages and assets, error links). */
const REFERENCE_PATHS = ['', '/', '/json', '/yaml', '/static/index.html', '/errors/code'];

/**
 * The interactive reference at the path of SVC_DOCS_URL, registered after every other route: a path
 * one of them takes (`/v1/policies`, `/healthz`) or lies under (`/policies/x`, a dashboard page) is
 * refused, naming the variable and the route, instead of failing the start with the router's own
 * error or hiding that route.
 */
export async function registerReference(app: FastifyInstance, config: Config): Promise<void> {
  const prefix = docsPathOf(config.docsUrl);
  for (const path of REFERENCE_PATHS) {
    const url = `${prefix}${path}`;
    if (app.findRoute({ method: 'GET', url })) {
      throw new Error(
        `SVC_DOCS_URL must not have the path ${prefix}: the reference served there would take ${url}, ` +
          `which a route of the service answers; give it a path of its own such as ${config.baseUrl}/docs, ` +
          `got "${config.docsUrl}"`,
      );
    }
  }
  // The reference's own pages and assets are public, whatever the default auth mode of routes.
  await app.register(async (docs) => {
    docs.addHook('onRoute', (route) => {
      route.config = { ...route.config, auth: 'none' };
    });
    docs.addHook('onRequest', async (req) => {
      if (req.raw.headers.range === undefined) return;
      const range = honouredRange(req.method, req.raw.headers.range);
      if (range === null) delete req.raw.headers.range;
      else req.raw.headers.range = range;
    });
    docs.setErrorHandler(docsErrors);
    await docs.register(swaggerUi, { routePrefix: prefix });
    // Error documentation links (`doc_url` of envelope B) land on the reference, which lists every
    // operation's error codes.
    docs.get(
      `${prefix}/errors/:code`,
      {
        schema: {
          hide: true,
          params: Type.Object({ code: Type.String({ pattern: '^[a-z0-9_]{1,64}$' }) }),
        },
      },
      async (_req, reply) => reply.redirect(`${prefix}/`, 302),
    );
  });
}
