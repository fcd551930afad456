import { createRequire } from 'node:module';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifySchema, RouteOptions } from 'fastify';
import type { Config } from '../config.js';
import { type ErrorCode, STATUS_BY_CODE } from '../lib/errors.js';
import type { AuthMode } from './auth.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

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
function errorResponse(status: number) {
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
  const own = (schema ?? {}) as FastifySchema & { response?: Record<string, unknown>; tags?: string[] };
  const mode: AuthMode = route.config?.auth ?? 'any';
  const response: Record<string, unknown> = { ...own.response };
  if (!Object.keys(response).some((s) => s.startsWith('2'))) response['2xx'] = { description: 'Success' };
  for (const status of errorStatuses(route, own, mode)) response[status] ??= errorResponse(status);
  return {
    url,
    schema: {
      ...own,
      tags: own.tags ?? [tagOf(route.url)],
      security: security(mode, route.config?.queryApiKey === true),
      response,
    },
  };
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
