import { createRequire } from 'node:module';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifySchema, RouteOptions } from 'fastify';
import type { Config } from '../config.js';
import { type ErrorCode, STATUS_BY_CODE } from '../lib/errors.js';
import { OPTIONAL_BODY } from '../lib/schemas.js';
import type { AuthMode } from './auth.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/** What a route documents without declaring it to Fastify (see `FastifySchema.documented`). */
export interface DocumentedOnly {
  /** A schema, or `{content: {mediaType: {schema}}}` for a body taken in several media types. */
  body?: TSchema | { content: Record<string, { schema: TSchema }> };
  headers?: TSchema;
  /** By status, as `schema.response`; a schema may list `content` by media type. */
  response?: Record<string, TSchema | Record<string, unknown>>;
}

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

const WHY: Record<number, string> = {
  400: 'The request is invalid',
  401: 'Missing or invalid credentials',
  403: 'The credentials do not allow this',
  404: 'The resource does not exist or belongs to another organization',
  409: 'Conflicts with the current state',
  413: 'The body is larger than 1 MiB',
  415: 'The body is not JSON',
  429: 'A rate limit or a plan limit is reached',
  500: 'Internal error',
  503: 'The store (or Redis) is unavailable, or the server is shutting down; retry',
};

/** The error envelope of one status, listing the codes the error table maps to it. */
export function errorResponse(status: number) {
  const codes = (Object.keys(STATUS_BY_CODE) as ErrorCode[]).filter((c) => STATUS_BY_CODE[c] === status);
  return {
    description: `${WHY[status] ?? 'Error'}: ${codes.join(', ')}`,
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

/** The standard errors a route can answer, from what it declares (auth mode, inputs, method). */
function errorStatuses(route: RouteOptions, schema: FastifySchema, mode: AuthMode): number[] {
  const methods = ([] as string[]).concat(route.method);
  const writes = methods.some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH' || m === 'DELETE');
  const hasBody = methods.some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH');
  const takesInput = hasBody || Boolean(schema.querystring || schema.params || route.url.includes(':'));
  const authed = mode !== 'none';
  const statuses = [
    takesInput && 400,
    authed && 401,
    authed && mode !== 'admin' && 403,
    (authed || route.url.includes(':')) && 404,
    authed && writes && 409,
    hasBody && 413,
    hasBody && 415,
    authed && hasBody && 429,
    500,
    503,
  ];
  return statuses.filter((s): s is number => s !== false);
}

function tagOf(url: string): string {
  const [first, second] = url.split('/').filter(Boolean);
  if (first === 'healthz' || first === 'readyz') return 'health';
  if (first === 'metrics' || first === 'openapi.json') return 'operations';
  if (first === 'ws') return 'events';
  return first === 'v1' && second ? second : (first ?? 'service');
}

/**
 * Documents a route from what it already declares: its schemas, its auth mode (security) and the
 * standard errors of the one error table. Only the document changes; the route's own validation and
 * serialization stay as declared.
 */
function documentRoute({ schema, url, route }: { schema: FastifySchema; url: string; route: RouteOptions }) {
  const { documented, ...own } = (schema ?? {}) as FastifySchema & {
    response?: Record<string, unknown>;
    tags?: string[];
  };
  const mode: AuthMode = route.config?.auth ?? 'any';
  // Every route declares its success (the API document test holds it to that): no generic 2xx.
  const response: Record<string, unknown> = { ...own.response, ...documented?.response };
  for (const status of errorStatuses(route, own, mode)) {
    const standard = errorResponse(status);
    const mine = documented?.response?.[status] as { description?: string } | undefined;
    // A documented answer on a standard error status (a JSON-RPC error) is one of two possible bodies.
    response[status] = mine
      ? { description: `${mine.description ?? ''} Or ${standard.description}`, anyOf: [mine, standard] }
      : (response[status] ?? standard);
  }
  return {
    url,
    schema: {
      ...own,
      ...(documented?.body && !own.body ? { body: documented.body } : {}),
      ...(documented?.headers && !own.headers ? { headers: documented.headers } : {}),
      tags: own.tags ?? [tagOf(route.url)],
      security: security(mode, route.config?.queryApiKey === true),
      response,
    },
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

/** The path the interactive reference is served at: SVC_DOCS_URL's path (default /docs). */
export function docsPath(config: Pick<Config, 'docsUrl'>): string {
  try {
    const path = new URL(config.docsUrl).pathname.replace(/\/+$/, '');
    return path === '' ? '/docs' : path;
  } catch {
    return '/docs';
  }
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
          'Tool-call policy enforcement for AI agents. Every non-2xx answer is `{error: {code, message}}`.',
      },
      servers: [{ url: config.baseUrl }],
      externalDocs: { description: 'API reference', url: config.docsUrl },
      components: { securitySchemes: SECURITY_SCHEMES },
    },
    transform: documentRoute,
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

  // The reference's own pages and assets are public, whatever the default auth mode of routes.
  await app.register(async (docs) => {
    docs.addHook('onRoute', (route) => {
      route.config = { ...route.config, auth: 'none' };
    });
    const prefix = docsPath(config);
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
