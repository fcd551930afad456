import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyServerOptions, RouteOptions } from 'fastify';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { withTestApp } from '../../test/helpers.js';
import { invoiceAnswer } from '../modules/payments/invoices.js';
import { providerAnswer } from '../modules/payments/providers.js';
import {
  InvoiceAnswerSchema,
  ProviderAnswerSchema,
  WorkflowAnswerSchema,
} from '../modules/payments/schemas.js';
import { workflowAnswer } from '../modules/payments/workflows.js';
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
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
  responses: Record<string, { description: string; content?: Record<string, { schema: Schema }> }>;
}
interface Schema {
  [key: string]: unknown;
  properties?: Record<string, Schema>;
  enum?: string[];
  anyOf?: Schema[];
}
interface Document {
  [key: string]: unknown;
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, Record<string, string>> };
}

let doc: Document;
/** Routes of the first app only (every test app registers the same). */
let routes: RouteOptions[];

const t = useTestApp();
beforeAll(async () => {
  routes = [...registered];
  const res = await t.inject({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  doc = res.json();
});

/**
 * What the document leaves out: a POST, PUT or PATCH without a request body schema (actions that
 * take none say so with NoBody), or an operation without its success answer: a 2xx with a schema
 * (202 and 204 have no body), a 101 upgrade or a 3xx redirect; only a route that refuses its
 * method (405) has none.
 */
function undocumented(paths: Document['paths']): string[] {
  const problems: string[] = [];
  const hasSchema = (content: Record<string, { schema?: Schema }> | undefined) =>
    Object.values(content ?? {}).some((c) => c.schema !== undefined && Object.keys(c.schema).length > 0);
  for (const [path, methods] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const name = `${method.toUpperCase()} ${path}`;
      if (['post', 'put', 'patch'].includes(method) && !hasSchema(op.requestBody?.content))
        problems.push(`${name}: no request body`);
      const statuses = Object.keys(op.responses);
      const success = statuses.filter((s) => /^(2\d\d|101|3\d\d)$/.test(s));
      if (success.length === 0 && !statuses.includes('405')) problems.push(`${name}: no success answer`);
      for (const status of success.filter((s) => s.startsWith('2') && s !== '202' && s !== '204')) {
        if (!hasSchema(op.responses[status]!.content)) problems.push(`${name}: ${status} without a schema`);
      }
    }
  }
  return problems;
}

/**
 * The fields of an answer its schema does not list: a response schema drops them from the answer.
 * Objects with `properties` list their fields; records (`patternProperties`) take any name.
 */
function unlisted(value: unknown, schema: Schema, at = ''): string[] {
  if (schema.anyOf) {
    const fits = schema.anyOf.map((s) => unlisted(value, s, at));
    return fits.find((f) => f.length === 0) ?? fits.flat();
  }
  if (Array.isArray(value))
    return value.flatMap((v, i) => unlisted(v, (schema.items ?? {}) as Schema, `${at}[${i}]`));
  if (value === null || typeof value !== 'object') return [];
  const pattern = Object.values((schema.patternProperties ?? {}) as Record<string, Schema>)[0];
  return Object.entries(value).flatMap(([key, v]) => {
    const field = schema.properties?.[key] ?? pattern;
    return field ? unlisted(v, field, `${at}.${key}`) : [`${at}.${key}`];
  });
}

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

describe('request and answer schemas', () => {
  it('describes the body of every POST, PUT and PATCH and the success answer of every route', () => {
    expect(undocumented(doc.paths).sort()).toEqual([]);
    // The check itself: a route that lost its body schema or its answer schema is reported.
    const paths = structuredClone(doc.paths);
    delete paths['/v1/tools/validate']!.post!.requestBody;
    delete paths['/v1/tools/validate']!.post!.responses['200']!.content;
    delete paths['/healthz']!.get!.responses['200'];
    expect(undocumented(paths).sort()).toEqual([
      'GET /healthz: no success answer',
      'POST /v1/tools/validate: 200 without a schema',
      'POST /v1/tools/validate: no request body',
    ]);
  });

  it('documents invoice ingest as UBL XML or JSON, and the answers of the payment gateway', () => {
    const ingest = operation('POST', '/v1/gateway/invoices')!;
    const bodies = ingest.requestBody!.content!;
    expect(Object.keys(bodies).sort()).toEqual(['application/json', 'application/xml', 'text/xml']);
    expect(bodies['application/xml']!.schema!.type).toBe('string');
    expect(bodies['application/json']!.schema!.required).toEqual(
      expect.arrayContaining(['invoice_number', 'payee', 'amount']),
    );
    for (const status of ['200', '201'])
      expect(
        ingest.responses[status]!.content!['application/json']!.schema.properties!.invoice_hash,
      ).toBeDefined();
    const provider = operation('GET', '/v1/gateway/providers/:id')!.responses['200']!.content![
      'application/json'
    ]!.schema;
    expect(provider.properties!.credentials!.properties!.names).toBeDefined();
    expect(provider.properties!.credentials!.properties!.values).toBeUndefined();
    const workflow = operation('POST', '/v1/gateway/workflows')!.responses['201']!.content![
      'application/json'
    ]!.schema;
    expect(workflow.properties!.map!.properties!.edges).toBeDefined();
    expect(operation('DELETE', '/v1/gateway/providers/:id')!.responses['204']!.content).toBeUndefined();
    expect(
      operation('POST', '/v1/gateway/approvals/:id/resolve')!.responses['200']!.content!['application/json']!
        .schema.properties!.approvers,
    ).toBeDefined();
  });

  it('lists every field the invoice, workflow and provider answers carry', () => {
    const at = '2026-01-01T00:00:00.000Z';
    const invoice = invoiceAnswer({
      organization_id: 'o',
      id: 'inv_1',
      project_id: null,
      invoice_hash: `sha256:${'0'.repeat(64)}`,
      format: 'json',
      status: 'parsed',
      document: '{}',
      terms: JSON.stringify({
        invoice_number: 'INV-1',
        issue_date: '2026-01-01',
        due_date: null,
        payee: { name: 'Acme', account_number: '1' },
        amount: { currency: 'USD', amount: '10.00' },
      }),
      beneficiary_hash: `sha256:${'1'.repeat(64)}`,
      parse_error: null,
      capsule_id: 'cap_1',
      consumed_at: at,
      created_at: at,
      updated_at: at,
    });
    const workflow = workflowAnswer({
      organization_id: 'o',
      entity_id: 'e',
      workflow_id: 'w',
      project_id: null,
      pack_id: 'p',
      map: JSON.stringify({
        initial: 'draft',
        edges: { draft: ['approved'], approved: [] },
        consume_from: 'approved',
        consume_to: 'paid',
        settle_to: null,
        person_states: ['approved'],
      }),
      state: 'draft',
      capsule_id: null,
      history: JSON.stringify([{ from: null, to: 'draft', at, by: 'key:k', reason: null }]),
      created_at: at,
      updated_at: at,
    });
    const provider = providerAnswer({
      organization_id: 'o',
      id: 'prv_1',
      name: 'bank',
      rail: 'ach',
      url: 'https://bank.example',
      credentials: 'sealed',
      credential_names: JSON.stringify(['authorization']),
      timeout_ms: 5000,
      enabled: 1,
      created_at: at,
      updated_at: at,
    });
    expect(unlisted(invoice, InvoiceAnswerSchema as Schema)).toEqual([]);
    expect(unlisted(workflow, WorkflowAnswerSchema as Schema)).toEqual([]);
    expect(unlisted(provider, ProviderAnswerSchema as Schema)).toEqual([]);
    // The check itself: a field the schema leaves out is reported.
    expect(unlisted({ ...provider, secret: 'x' }, ProviderAnswerSchema as Schema)).toEqual(['.secret']);
    expect(unlisted(workflow, { ...WorkflowAnswerSchema, properties: { map: {} } } as Schema)).toContain(
      '.map.initial',
    );
  });

  it('marks the bodies of actions that take none as optional', () => {
    const revoke = operation('POST', '/v1/api-keys/:id/revoke')!;
    expect(revoke.requestBody!.required).toBe(false);
    expect(JSON.stringify(revoke.requestBody)).not.toContain('x-optional-body');
    expect(operation('POST', '/v1/tools/validate')!.requestBody!.required).toBe(true);
    // A body that may be left out (the organization can come from X-Organization-Id).
    const regenerate = operation('POST', '/v1/projects/:id/regenerate-key')!;
    expect(regenerate.requestBody!.required).toBe(false);
    expect(JSON.stringify(regenerate.requestBody)).toContain('organizationId');
  });

  it('documents the MCP endpoints as JSON-RPC, accepting every kind of valid MCP message', () => {
    const post = operation('POST', '/v1/mcp/:upstreamSlug')!;
    const body = post.requestBody!.content!['application/json']!.schema!;
    const accepts = new Ajv2020({ strict: false }).compile(body);
    const valid = [
      {
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } },
      },
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 'a-1', method: 'tools/call', params: { name: 'echo', arguments: { x: 1 } } },
      { jsonrpc: '2.0', id: 7, result: { roots: [] } },
      { jsonrpc: '2.0', id: 8, error: { code: -1, message: 'no' } },
    ];
    for (const message of valid) expect(accepts(message), JSON.stringify(message)).toBe(true);
    expect(accepts([valid[0]])).toBe(false);
    expect(Object.keys(post.responses['200']!.content!).sort()).toEqual([
      'application/json',
      'text/event-stream',
    ]);
    expect(post.responses['202']).toBeDefined();
    // A malformed message is answered in JSON-RPC; a path that fails validation in the API's envelope.
    expect(post.responses['400']!.content!['application/json']!.schema.anyOf).toHaveLength(2);
    expect(
      operation('GET', '/v1/mcp/:upstreamSlug')!.responses['200']!.content!['text/event-stream'],
    ).toBeDefined();
    expect(operation('DELETE', '/v1/mcp/:upstreamSlug')!.responses['204']).toBeDefined();
    expect(operation('POST', '/v1/mcp/charter')!.requestBody!.content!['application/json']!.schema).toEqual(
      body,
    );
    expect(operation('GET', '/v1/mcp/charter')!.responses['405']).toBeDefined();
  });

  it('documents the Charter routes and draft deletion with their answers', () => {
    const turn = operation('POST', '/v1/charter/turn')!;
    expect(
      turn.responses['200']!.content!['application/json']!.schema.properties!.verification,
    ).toBeDefined();
    expect(
      operation('POST', '/v1/charter/stream')!.responses['200']!.content!['text/event-stream'],
    ).toBeDefined();
    const approve = operation('POST', '/v1/charter/verifications/:id/approve')!;
    expect(approve.responses['200']!.content!['application/json']!.schema.properties!.changes).toBeDefined();
    expect(approve.responses['404']).toBeDefined();
    expect(operation('GET', '/charter/verify/:id')!.responses['200']!.content!['text/html']).toBeDefined();
    const drop = operation('DELETE', '/v1/policy-drafts/:id')!;
    expect(drop.responses['204']!.content).toBeUndefined();
    expect(Object.keys(drop.responses)).toEqual(expect.arrayContaining(['400', '401', '403', '404', '409']));
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
    await withTestApp({ docsUrl: 'https://api.example.com/reference' }, async (moved) => {
      expect((await moved.inject({ method: 'GET', url: '/reference' })).statusCode).toBe(200);
      expect((await moved.inject({ method: 'GET', url: '/docs' })).statusCode).toBe(404);
      const doc = (await moved.inject({ method: 'GET', url: '/openapi.json' })).json();
      expect(doc.externalDocs.url).toBe('https://api.example.com/reference');
    });
  });
});
