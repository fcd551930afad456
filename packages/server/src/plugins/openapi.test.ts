import { Validator } from '@seriousme/openapi-schema-validator';
import type { FastifyServerOptions, RouteOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestApp, type TestApp } from '../../test/helpers.js';
import { isDashboardRoute } from './dashboard.js';

/** Every route any app registers in this file, collected as Fastify adds them. */
const registered = vi.hoisted(() => [] as RouteOptions[]);
vi.mock('fastify', async (importOriginal) => {
  const mod = await importOriginal<typeof import('fastify')>();
  const withRouteLog = ((opts?: FastifyServerOptions) => {
    const app = mod.default(opts);
    app.addHook('onRoute', (route) => {
      registered.push(route);
    });
    return app;
  }) as typeof mod.default;
  return { ...mod, default: withRouteLog };
});

interface Operation {
  security?: Record<string, string[]>[];
  responses: Record<string, { description: string; content?: Record<string, { schema: Schema }> }>;
}
interface Schema {
  properties?: Record<string, Schema>;
  enum?: string[];
}
interface Document {
  [key: string]: unknown;
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, Record<string, string>> };
}

let t: TestApp;
let doc: Document;
/** Routes of the first app only (every test app registers the same). */
let routes: RouteOptions[];

beforeAll(async () => {
  registered.length = 0;
  t = await createTestApp();
  routes = [...registered];
  const res = await t.inject({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  doc = res.json();
});
afterAll(async () => {
  await t.close();
});

const openApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
const operation = (method: string, url: string) => doc.paths[openApiPath(url)]?.[method.toLowerCase()];

describe('GET /openapi.json', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const result = await new Validator().validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('lists every registered route; only the reference pages are left out', () => {
    expect(routes.length).toBeGreaterThan(50);
    const missing: string[] = [];
    for (const route of routes) {
      for (const method of ([] as string[]).concat(route.method)) {
        // HEAD routes are Fastify's automatic twins of GET routes.
        if (method === 'HEAD') continue;
        if (route.schema?.hide) {
          expect(route.url.startsWith('/docs') || isDashboardRoute(route.url), route.url).toBe(true);
          continue;
        }
        if (!operation(method, route.url)) missing.push(`${method} ${route.url}`);
      }
    }
    expect(missing).toEqual([]);
    expect(operation('POST', '/v1/tools/validate')).toBeDefined();
    expect(operation('GET', '/metrics')).toBeDefined();
    expect(operation('GET', '/openapi.json')).toBeDefined();
  });

  it('describes both authentication schemes and applies them per route', () => {
    const schemes = doc.components.securitySchemes;
    expect(schemes.apiKey).toMatchObject({ type: 'apiKey', in: 'header', name: 'X-Service-API-Key' });
    expect(schemes.userToken).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
    expect(schemes.adminToken).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(operation('POST', '/v1/tools/validate')!.security).toEqual([{ apiKey: [] }]);
    expect(operation('POST', '/v1/organizations')!.security).toEqual([{ userToken: [] }]);
    expect(operation('GET', '/v1/projects')!.security).toEqual([{ apiKey: [] }, { userToken: [] }]);
    expect(operation('GET', '/metrics')!.security).toEqual([{ adminToken: [] }]);
    expect(operation('GET', '/healthz')!.security).toEqual([]);
  });

  it('gives every route its standard errors in the one envelope, with the codes of the error table', () => {
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        expect(op.responses['500'], `${method} ${path}`).toBeDefined();
        expect(op.responses['503'], `${method} ${path}`).toBeDefined();
        expect(Object.keys(op.responses).some((s) => s.startsWith('2'))).toBe(true);
      }
    }
    const validate = operation('POST', '/v1/tools/validate')!;
    for (const status of ['400', '401', '403', '413', '415', '429'])
      expect(validate.responses[status]).toBeDefined();
    const unauthorized = validate.responses['401']!.content!['application/json']!.schema;
    expect(unauthorized.properties!.error!.properties!.code!.enum).toEqual([
      'unauthorized',
      'invalid_api_key',
    ]);
    expect(validate.responses['429']!.description).toContain('rate_limit_exceeded');
    // Declared success responses are kept as the route declares them.
    expect(
      validate.responses['200']!.content!['application/json']!.schema.properties!.decision,
    ).toBeDefined();
    expect(operation('GET', '/healthz')!.responses['401']).toBeUndefined();
  });
});

describe('the interactive reference', () => {
  it('is served at /docs from local assets only, without credentials', async () => {
    const page = await t.inject({ method: 'GET', url: '/docs' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets.length).toBeGreaterThan(2);
    for (const asset of assets) {
      expect(asset).not.toMatch(/^(https?:)?\/\//);
      const res = await t.inject({ method: 'GET', url: new URL(asset, 'http://x/docs/').pathname });
      expect(res.statusCode, asset).toBe(200);
    }
    const init = await t.inject({ method: 'GET', url: '/docs/static/swagger-initializer.js' });
    expect(init.statusCode).toBe(200);
    const link = await t.inject({ method: 'GET', url: '/docs/errors/signing_key_missing' });
    expect(link.statusCode).toBe(302);
    expect(link.headers.location).toBe('/docs/');
    const spec = await t.inject({ method: 'GET', url: '/docs/json' });
    expect(spec.json().openapi).toBe('3.1.0');
  });

  it('moves to the path of SVC_DOCS_URL', async () => {
    const moved = await createTestApp({ docsUrl: 'https://api.example.com/reference' });
    try {
      expect((await moved.inject({ method: 'GET', url: '/reference' })).statusCode).toBe(200);
      expect((await moved.inject({ method: 'GET', url: '/docs' })).statusCode).toBe(404);
      const doc = (await moved.inject({ method: 'GET', url: '/openapi.json' })).json();
      expect(doc.externalDocs.url).toBe('https://api.example.com/reference');
    } finally {
      await moved.close();
    }
  });
});
