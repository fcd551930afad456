import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyServerOptions, InjectOptions, LightMyRequestResponse, RouteOptions } from 'fastify';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { setTier } from '../../test/approvals.js';
import { useTestApp } from '../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant, withTestApp } from '../../test/helpers.js';
import { docsPathOf, loadConfig } from '../config.js';
import { flowError } from '../modules/payments/flow-model.js';
import { invoiceAnswer } from '../modules/payments/invoices.js';
import { gatewayError } from '../modules/payments/model.js';
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
  parameters?: { in: string; name: string; required?: boolean; schema: Schema; description?: string }[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: Schema }> };
  responses: Record<
    string,
    {
      description: string;
      content?: Record<string, { schema: Schema }>;
      headers?: Record<string, { schema: Schema }>;
    }
  >;
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
  components: { securitySchemes: Record<string, Record<string, string>>; schemas: Record<string, Schema> };
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

/** The paths that answer their errors in envelope B: the payment gateway and the key set. */
const isEnvelopeB = (path: string) =>
  path.startsWith('/v1/gateway/') || path === '/.well-known/svc-keys.json';

const ajv = new Ajv2020({ strict: false, allErrors: true });

/** The JSON schema the document gives an answer of `method url` with this status. */
function answerSchema(method: string, url: string, status: number): Schema {
  const answer = operation(method, url)?.responses[String(status)];
  if (!answer) throw new Error(`${method} ${url}: the document has no ${status}`);
  return answer.content!['application/json']!.schema;
}

/**
 * What keeps a real answer from fitting the document: Ajv's errors against the schema of its
 * operation and status, and its members the schema does not list.
 */
function misfits(res: LightMyRequestResponse, schema: Schema): string[] {
  const check = ajv.compile(schema);
  const body = res.json();
  const errors = check(body) ? [] : (check.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
  return [...errors, ...unlisted(body, schema).map((m) => `${m} is not listed`)];
}

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

  it('gives every route its standard errors in its envelope, with the codes of the error table', () => {
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        expect(op.responses['500'], `${method} ${path}`).toBeDefined();
        // Envelope B lists a 503 only where one of its codes answers it (signing_key_missing…).
        if (!isEnvelopeB(path)) expect(op.responses['503'], `${method} ${path}`).toBeDefined();
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

  it('answers Range on its assets as RFC 9110 has it: 206, 416 in the envelope, or the whole asset', async () => {
    const url = '/docs/static/swagger-ui.css';
    const whole = await t.inject({ method: 'GET', url });
    expect(whole.statusCode).toBe(200);
    const size = whole.rawPayload.length;
    expect(size).toBeGreaterThan(1000);
    const get = (range: string, more: Record<string, string> = {}) =>
      t.inject({ method: 'GET', url, headers: { range, ...more } });
    // No range overlaps the asset: 416 with its size, in the API's envelope.
    for (const range of [`bytes=${size}-`, 'bytes=999999999-', 'bytes=-0', `bytes=${size}-,${size + 9}-`]) {
      const res = await get(range);
      expect([range, res.statusCode]).toEqual([range, 416]);
      expect(res.headers['content-range']).toBe(`bytes */${size}`);
      expect(res.json()).toEqual({ error: { code: 'range_not_satisfiable', message: expect.any(String) } });
    }
    // One satisfiable range (the unit is case-insensitive): 206 with that part.
    for (const range of ['bytes=0-9', 'BYTES=0-9', 'bytes=0-9, ', 'bytes=-10']) {
      const res = await get(range);
      const start = range === 'bytes=-10' ? size - 10 : 0;
      expect([range, res.statusCode]).toEqual([range, 206]);
      expect(res.headers['content-range']).toBe(`bytes ${start}-${start + 9}/${size}`);
      expect(res.rawPayload.equals(whole.rawPayload.subarray(start, start + 10)), range).toBe(true);
    }
    // A malformed Range or another unit is ignored: the whole asset.
    const malformed = [
      'bytes=abc',
      'bytes=',
      'bytes=5-2',
      'bytes=0-1,x',
      'bytes=--1',
      'bytes 0-1',
      'items=0-5',
    ];
    for (const range of malformed) {
      const res = await get(range);
      expect([range, res.statusCode]).toEqual([range, 200]);
      expect(res.headers['content-range']).toBeUndefined();
      expect(res.rawPayload.equals(whole.rawPayload), range).toBe(true);
    }
    // Only GET has range handling: HEAD ignores it, satisfiable or not.
    for (const range of ['bytes=999999999-', 'bytes=0-9']) {
      const res = await t.inject({ method: 'HEAD', url, headers: { range } });
      expect([range, res.statusCode]).toEqual([range, 200]);
      expect(res.headers['content-length']).toBe(String(size));
    }
    // An If-Range that no longer matches: the whole asset, whatever the range.
    const stale = await get('bytes=999999999-', { 'if-range': '"another-version"' });
    expect(stale.statusCode).toBe(200);
    expect(stale.rawPayload.equals(whole.rawPayload)).toBe(true);
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

describe('SVC_DOCS_URL and the routes of the service', () => {
  /** The start's refusal of a reference at `path` of this server, or null when it started. */
  const refusal = async (path: string) => {
    try {
      await withTestApp({ docsUrl: `http://127.0.0.1:8080${path}` }, async () => {});
      return null;
    } catch (err) {
      return (err as Error).message;
    }
  };

  it('refuses, at start and naming the variable, a path that a route of the service takes or lies under', async () => {
    const own = docsPathOf(loadConfig({}).docsUrl);
    // Every route's path up to its first parameter or wildcard, as the router matches it.
    const paths = routes
      .map((r) => r.url)
      .filter((url) => url !== own && !url.startsWith(`${own}/`))
      .map((url) => {
        const segments = url.split('/').filter((s) => s !== '');
        const end = segments.findIndex((s) => s.includes(':') || s.includes('*'));
        return `/${(end === -1 ? segments : segments.slice(0, end)).join('/')}`;
      })
      .filter((p) => p !== '/' && routes.some((r) => r.url === p && r.method.includes('GET')));
    expect(paths).toEqual(expect.arrayContaining(['/v1/policies', '/healthz', '/approvals']));
    // A sample (each start builds a whole app), and pages under a dashboard page.
    for (const path of ['/v1/policies', '/healthz', '/openapi.json', '/approvals', '/policies/reference']) {
      expect(await refusal(path), path).toMatch(
        new RegExp(
          `^SVC_DOCS_URL must not have the path ${path.replaceAll('.', '\\.')}: the reference served there would take `,
        ),
      );
    }
  });

  it('serves the reference at a path no route takes, under /v1 too', async () => {
    await withTestApp({ docsUrl: 'https://docs.example.com/v1/reference' }, async (app) => {
      expect((await app.inject({ method: 'GET', url: '/v1/reference' })).statusCode).toBe(200);
      expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    });
  });
});

describe('envelope B: the payment gateway and the key set', () => {
  let tenant: Tenant;
  beforeAll(async () => {
    tenant = await createTenant(t);
  });
  const key = () => keyHeader(tenant.apiKey);
  const MEMBERS = ['type', 'code', 'message', 'param', 'doc_url', 'hint', 'request_id'];

  it('describes every error of those paths in envelope B, and no other path in it', () => {
    const gateway = Object.keys(doc.paths).filter(isEnvelopeB);
    expect(gateway.length).toBeGreaterThan(15);
    expect(gateway).toContain('/.well-known/svc-keys.json');
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        for (const [status, answer] of Object.entries(op.responses)) {
          if (Number(status) < 400 || !answer.content?.['application/json']) continue;
          const error = answer.content['application/json'].schema.properties?.error;
          const where = `${method.toUpperCase()} ${path} ${status}`;
          if (isEnvelopeB(path)) {
            expect(error?.required, where).toEqual(MEMBERS);
            // None of envelope A's own codes (validation_failed, slug_taken, not_found, internal_error…).
            for (const code of ['validation_failed', 'slug_taken', 'not_found', 'internal_error'])
              expect(error?.properties?.code?.enum, where).not.toContain(code);
          } else {
            expect(JSON.stringify(answer.content), where).not.toContain('doc_url');
          }
        }
      }
    }
    expect(doc.components.schemas.EnvelopeB!.properties!.error!.required).toEqual(MEMBERS);
    const info = (doc.info as { description: string }).description;
    expect(info).toContain('/v1/gateway');
    expect(info).toContain('/.well-known/svc-keys.json');
    expect(info).toContain('doc_url');
    expect(info).not.toMatch(/Every non-2xx answer is `\{error: \{code, message\}\}`/);
  });

  it('lists the codes of the catalog each gateway operation answers, by status', () => {
    const codes = (method: string, url: string, status: number) =>
      answerSchema(method, url, status).properties!.error!.properties!.code!.enum;
    const consume = '/v1/gateway/capsules/consume';
    expect(codes('POST', consume, 400)).toEqual(
      expect.arrayContaining([
        'capsule_payload_invalid',
        'invalid_amount_precision',
        'invalid_json',
        'idempotency_key_reused_with_different_payload',
      ]),
    );
    expect(codes('POST', consume, 403)).toEqual(
      expect.arrayContaining([
        'capsule_expired',
        'capsule_signature_invalid',
        'capsule_kid_unknown',
        'beneficiary_hash_mismatch',
        'beneficiary_held',
        'beneficiary_quarantine_active',
        'amount_exceeds_capsule_ceiling',
        'amount_exceeds_entity_cap',
        'rail_not_in_allowlist',
      ]),
    );
    expect(codes('POST', consume, 409)).toEqual(
      expect.arrayContaining(['capsule_replayed', 'capsule_consumed', 'policy_pack_hash_mismatch']),
    );
    expect(codes('POST', consume, 429)).toEqual(['provider_rate_limited']);
    expect(codes('POST', consume, 500)).toEqual(['internal_server_error', 'policy_eval_error']);
    expect(codes('POST', consume, 502)).toEqual(['provider_upstream_error']);
    expect(codes('POST', consume, 504)).toEqual(['provider_timeout']);
    expect(operation('POST', consume)!.responses['429']!.headers!['Retry-After']).toBeDefined();
    expect(codes('POST', '/v1/gateway/capsules', 409)).toEqual(
      expect.arrayContaining(['approval_required', 'dual_control_required', 'approval_payload_mismatch']),
    );
    expect(codes('POST', '/v1/gateway/capsules', 503)).toContain('signing_key_missing');
    expect(codes('POST', '/v1/gateway/invoices', 502)).toEqual(['invoice_parse_failed']);
    expect(codes('GET', '/v1/gateway/workflows/:entityId/:workflowId', 404)).toEqual(['workflow_not_found']);
    expect(codes('POST', '/v1/gateway/approvals/:id/resolve', 409)).toEqual(
      expect.arrayContaining(['approval_already_resolved', 'approval_expired']),
    );
    expect(codes('GET', '/.well-known/svc-keys.json', 503)).toEqual([
      'service_unavailable',
      'signing_key_missing',
    ]);
    // The members some codes add are listed with them.
    const mint409 = answerSchema('POST', '/v1/gateway/capsules', 409).properties!.error!.properties!;
    expect(Object.keys(mint409)).toEqual(expect.arrayContaining(['approval_id', 'payload_hash']));
    // A read answers no body errors; a route without a provider answers no provider errors.
    expect(operation('GET', '/v1/gateway/capsules/:id')!.responses['413']).toBeUndefined();
    expect(operation('GET', '/v1/gateway/payees/:id')!.responses['502']).toBeUndefined();
  });

  it('lists every code the gateway makes on an operation; not_implemented, which none answers, on none', () => {
    const listed = new Set<string>();
    const operations = Object.entries(doc.paths)
      .filter(([path]) => isEnvelopeB(path))
      .flatMap(([, methods]) => Object.values(methods));
    for (const answer of operations.flatMap((op) => Object.values(op.responses))) {
      const error = answer.content?.['application/json']?.schema.properties?.error;
      for (const code of error?.properties?.code?.enum ?? []) listed.add(code);
    }
    const made = Object.values({ ...gatewayError, ...flowError }).map(
      (make) => (make as (...args: string[]) => { body: { code: string } })('1', '1', '1').body.code,
    );
    expect(made.length).toBeGreaterThan(40);
    expect(made.filter((code) => !listed.has(code))).toEqual(['not_implemented']);
  });

  it('states the body limit of each route: 512 KiB on the gateway, 1 MiB for invoices and elsewhere', () => {
    expect(operation('POST', '/v1/gateway/payees')!.responses['413']!.description).toContain(
      '512 KiB (524288 bytes)',
    );
    expect(operation('POST', '/v1/gateway/invoices')!.responses['413']!.description).toContain(
      '1 MiB (1048576 bytes)',
    );
    expect(operation('POST', '/v1/tools/validate')!.responses['413']!.description).toContain('1 MiB');
    expect(operation('POST', '/v1/gateway/invoices')!.responses['415']!.description).toContain(
      'application/xml',
    );
  });

  it('documents the Idempotency-Key header on every gateway POST and the decision log, and only there', () => {
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        const header = op.parameters?.find((p) => p.in === 'header' && p.name === 'Idempotency-Key');
        const takes = method === 'post' && (path.startsWith('/v1/gateway/') || path === '/v1/decisions');
        expect(Boolean(header), `${method.toUpperCase()} ${path}`).toBe(takes);
        if (header) {
          expect(header.required).toBe(false);
          expect(header.schema).toMatchObject({ type: 'string', minLength: 1, maxLength: 255 });
          expect(answerSchema(method, path, 400).properties!.error!.properties!.code!.enum).toContain(
            'idempotency_key_reused_with_different_payload',
          );
          expect(answerSchema(method, path, 409).properties!.error!.properties!.code!.enum).toContain(
            'idempotency_request_in_progress',
          );
        }
      }
    }
  });

  it('real error answers of the gateway fit the document (400, 401, 404, 409, 413, 415)', async () => {
    const answers: [string, string, LightMyRequestResponse, number, string][] = [];
    /** Sends a request to the route `path` (at `opts.url` when its parameters are filled in). */
    const send = async (
      method: 'GET' | 'POST' | 'PUT',
      path: string,
      status: number,
      code: string,
      opts: { url?: string; headers?: Record<string, string>; payload?: unknown } = {},
    ) => {
      const res = await t.inject({
        method,
        url: opts.url ?? path,
        headers: opts.headers ?? key(),
        ...(opts.payload !== undefined ? { payload: opts.payload as InjectOptions['payload'] } : {}),
      });
      expect([res.statusCode, res.json().error?.code], res.body).toEqual([status, code]);
      answers.push([method, path, res, status, code]);
      return res;
    };
    const consume = '/v1/gateway/capsules/consume';
    const beneficiary = { name: 'ACME', account_number: 'DE89' };
    const invalid = await send('POST', consume, 400, 'capsule_payload_invalid', {
      payload: { capsule: 'x', amount: 12, currency: 'USD', rail: 'ach', beneficiary },
    });
    expect(invalid.json().error.param).toBe('amount');
    await send('POST', '/v1/gateway/payees', 400, 'invalid_json', {
      headers: { ...key(), 'content-type': 'application/json' },
      payload: '{"details":',
    });
    const payee = { details: { name: 'Bolt', account_number: 'NL91' } };
    const once = { ...key(), 'idempotency-key': 'openapi-1' };
    expect(
      (await t.inject({ method: 'POST', url: '/v1/gateway/payees', headers: once, payload: payee }))
        .statusCode,
    ).toBe(201);
    await send('POST', '/v1/gateway/payees', 400, 'idempotency_key_reused_with_different_payload', {
      headers: once,
      payload: { details: { name: 'Volt', account_number: 'NL92' } },
    });
    const capsule = { url: '/v1/gateway/capsules/none' };
    await send('GET', '/v1/gateway/capsules/:id', 401, 'unauthorized', { ...capsule, headers: {} });
    await send('GET', '/v1/gateway/capsules/:id', 404, 'capsule_not_found', capsule);
    const workflow = { entity_id: 'e-1', workflow_id: 'w-1' };
    const created = await t.inject({
      method: 'POST',
      url: '/v1/gateway/workflows',
      headers: key(),
      payload: workflow,
    });
    expect(created.statusCode, created.body).toBe(201);
    await send('POST', '/v1/gateway/workflows', 409, 'workflow_already_exists', { payload: workflow });
    // 512 KiB is the gateway's limit: one byte more is refused before the body is read.
    const sized = (bytes: number) => {
      const frame = JSON.stringify({ details: { name: '' } });
      return JSON.stringify({ details: { name: 'x'.repeat(bytes - frame.length) } });
    };
    const json = { ...key(), 'content-type': 'application/json' };
    await send('POST', '/v1/gateway/payees', 413, 'payload_too_large', {
      headers: json,
      payload: sized(524_289),
    });
    const atLimit = await t.inject({
      method: 'POST',
      url: '/v1/gateway/payees',
      headers: json,
      payload: sized(524_288),
    });
    expect(atLimit.statusCode).not.toBe(413);
    await send('POST', '/v1/gateway/payees', 415, 'unsupported_media_type', {
      headers: { ...key(), 'content-type': 'text/plain' },
      payload: 'hello',
    });
    for (const [method, url, res, status, code] of answers) {
      expect(misfits(res, answerSchema(method, url, status)), `${method} ${url} ${status} ${code}`).toEqual(
        [],
      );
    }
  });

  it('a mint that needs an approval fits the document with the members it adds', async () => {
    const team = await createTenant(t);
    await setTier(t, team, 'team');
    const pack = await t.inject({
      method: 'PUT',
      url: '/v1/gateway/packs/openapi-pack',
      headers: asUser(team),
      payload: { allowed_rails: ['ach'], approval_threshold_usd: '10.00' },
    });
    expect(pack.statusCode, pack.body).toBe(201);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: keyHeader(team.apiKey),
      payload: {
        entity_id: 'e-1',
        agent_id: 'agent-1',
        pack_id: 'openapi-pack',
        rails: ['ach'],
        beneficiary: { details: { name: 'Bolt', account_number: 'NL91' } },
        amount_ceiling: { currency: 'USD', amount: '50.00' },
        ttl_seconds: 300,
      },
    });
    expect([res.statusCode, res.json().error.code]).toEqual([409, 'approval_required']);
    expect(res.json().error.approval_id).toEqual(expect.any(String));
    expect(misfits(res, answerSchema('POST', '/v1/gateway/capsules', 409))).toEqual([]);
  });

  it('real error answers of the key set fit the document, its 404 the envelope of the components', async () => {
    const bad = await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json?x=%00' });
    expect([bad.statusCode, bad.json().error.code]).toEqual([400, 'invalid_request']);
    expect(misfits(bad, answerSchema('GET', '/.well-known/svc-keys.json', 400))).toEqual([]);
    // Methods without a route and unknown gateway paths: 404 route_not_found in envelope B.
    const envelope = doc.components.schemas.EnvelopeB!;
    for (const [method, url] of [
      ['POST', '/.well-known/svc-keys.json'],
      ['DELETE', '/.well-known/svc-keys.json'],
      ['GET', '/v1/gateway/nothing-here'],
    ] as const) {
      const res = await t.inject({ method, url, headers: key() });
      expect([res.statusCode, res.json().error.code]).toEqual([404, 'route_not_found']);
      expect(misfits(res, envelope), `${method} ${url}`).toEqual([]);
    }
  });
});

describe('envelope A answers and headers the audit found undocumented', () => {
  it('declares the errors /ws and the OpenID Connect sign-in check themselves, and real ones fit', async () => {
    const codes = (method: string, path: string, status: string) =>
      operation(method, path)!.responses[status]!.content!['application/json']!.schema.properties!.error!
        .properties!.code!.enum;
    expect(codes('GET', '/ws', '401')).toContain('unauthorized');
    expect(codes('GET', '/ws', '400')).toContain('validation_failed');
    expect(codes('GET', '/v1/auth/oidc/login', '404')).toContain('not_found');
    expect(codes('GET', '/v1/auth/oidc/callback', '404')).toContain('not_found');
    const ws = await t.inject({ method: 'GET', url: '/ws' });
    expect([ws.statusCode, ws.json().error.code]).toEqual([401, 'unauthorized']);
    const login = await t.inject({ method: 'GET', url: '/v1/auth/oidc/login' });
    expect([login.statusCode, login.json().error.code]).toEqual([404, 'not_found']);
  });

  it('declares 410 expired on resolving an approval, and a real one fits', async () => {
    const resolve = operation('POST', '/v1/approvals/:id/resolve')!;
    expect(
      resolve.responses['410']!.content!['application/json']!.schema.properties!.error!.properties!.code!
        .enum,
    ).toEqual(['expired']);
    const team = await createTenant(t);
    await setTier(t, team, 'team');
    const opened = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: keyHeader(team.apiKey),
      payload: { toolName: 'wire', arguments: { a: 1 }, expiresInSeconds: 60 },
    });
    expect(opened.statusCode, opened.body).toBe(201);
    const id = opened.json().id as string;
    await t.store.db
      .updateTable('approvals')
      .set({ expires_at: '2000-01-01T00:00:00.000Z' })
      .where('id', '=', id)
      .execute();
    const res = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${id}/resolve`,
      headers: asUser(team),
      payload: { action: 'approve' },
    });
    expect([res.statusCode, res.json().error?.code]).toEqual([410, 'expired']);
    expect(misfits(res, answerSchema('POST', '/v1/approvals/:id/resolve', 410))).toEqual([]);
  });

  it('documents X-Organization-Id where a user token acts in an organization it names by it', () => {
    const header = (method: string, url: string) =>
      operation(method, url)!.parameters?.find((p) => p.in === 'header' && p.name === 'X-Organization-Id');
    for (const [method, url] of [
      ['GET', '/v1/api-keys'],
      ['GET', '/v1/decisions'],
      ['POST', '/v1/approvals/:id/resolve'],
      ['POST', '/v1/projects/:id/regenerate-key'],
      ['POST', '/v1/gateway/capsules'],
      ['GET', '/v1/events/stream'],
    ]) {
      expect(header(method!, url!), `${method} ${url}`).toMatchObject({ required: false });
      expect(header(method!, url!)!.description).toContain('missing_organization');
    }
    // Not where no user token is taken, nor where the organization is the user's own or in the path.
    for (const [method, url] of [
      ['POST', '/v1/tools/validate'],
      ['GET', '/v1/organizations'],
      ['GET', '/v1/organizations/:id'],
      ['GET', '/v1/projects/:id'],
      ['GET', '/healthz'],
    ])
      expect(header(method!, url!), `${method} ${url}`).toBeUndefined();
  });

  it('documents the X-RateLimit-* headers of the rate-limited routes on the answers that carry them', async () => {
    const RATE = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];
    const rateHeaders = (res: LightMyRequestResponse) =>
      Object.keys(res.headers).filter((h) => h.startsWith('x-ratelimit-'));
    const tenant = await createTenant(t);
    const approver = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: asUser(tenant),
      payload: { name: 'approver only', projectId: tenant.projectId, scopes: ['approvals:resolve'] },
    });
    expect(approver.statusCode, approver.body).toBe(201);
    for (const url of ['/v1/tools/validate', '/v1/validate', '/v1/decisions']) {
      const op = operation('POST', url)!;
      // Counted once the API key is accepted: the 401 and 403 of authentication come before.
      for (const status of Object.keys(op.responses)) {
        const documented = Object.keys(op.responses[status]!.headers ?? {});
        if (status === '401' || status === '403') expect(documented, `${url} ${status}`).toEqual([]);
        else expect(documented, `${url} ${status}`).toEqual(expect.arrayContaining(RATE));
      }
      expect(op.responses['429']!.headers!['Retry-After']).toBeDefined();
      // What the route really sends: a user token and a key without the route's scope answer 403
      // without them; an accepted key's refused body answers 400 with them.
      for (const headers of [asUser(tenant), keyHeader(approver.json().key)]) {
        const res = await t.inject({ method: 'POST', url, headers, payload: {} });
        expect([res.statusCode, res.json().error.code], res.body).toEqual([403, 'authorization_error']);
        expect(rateHeaders(res), url).toEqual([]);
      }
      const counted = await t.inject({ method: 'POST', url, headers: keyHeader(tenant.apiKey), payload: {} });
      expect(counted.statusCode, counted.body).toBe(400);
      expect(rateHeaders(counted).sort(), url).toEqual(RATE.map((h) => h.toLowerCase()).sort());
    }
    expect(operation('GET', '/v1/decisions')!.responses['200']!.headers).toBeUndefined();
    // A route that takes users counts them too: its 403 of a non-member comes after counting.
    const verifications = operation('GET', '/v1/charter/verifications')!;
    expect(Object.keys(verifications.responses['403']!.headers ?? {})).toEqual(expect.arrayContaining(RATE));
    const other = await createTenant(t);
    const outsider = await t.inject({
      method: 'GET',
      url: '/v1/charter/verifications',
      headers: { ...asUser(tenant), 'x-organization-id': other.orgId },
    });
    expect([outsider.statusCode, outsider.json().error.code]).toEqual([403, 'authorization_error']);
    expect(rateHeaders(outsider)).toHaveLength(3);
  });

  it('describes the bounds and values of the decision queries, and url as required for an upstream', () => {
    const param = (url: string, name: string) =>
      operation('GET', url)!.parameters!.find((p) => p.in === 'query' && p.name === name)!.schema;
    expect(param('/v1/decisions', 'limit')).toMatchObject({
      type: 'integer',
      minimum: 1,
      maximum: 100,
      default: 50,
    });
    expect(param('/v1/decisions', 'offset')).toMatchObject({ type: 'integer', minimum: 0, default: 0 });
    expect(param('/v1/decisions', 'decision').enum).toEqual(['allow', 'deny', 'require_approval']);
    expect(param('/v1/approvals/resolved', 'limit')).toMatchObject({
      type: 'integer',
      minimum: 1,
      maximum: 200,
      default: 50,
    });
    expect(param('/v1/approvals/resolved', 'offset')).toMatchObject({
      type: 'integer',
      minimum: 0,
      default: 0,
    });
    expect(
      operation('GET', '/v1/approvals/resolved')!.responses['200']!.content!['application/json']!.schema!
        .properties!.pagination!.required,
    ).toEqual(['total', 'limit', 'offset', 'hasMore']);
    expect(param('/v1/decisions/stats', 'days')).toMatchObject({
      type: 'integer',
      minimum: 1,
      maximum: 90,
      default: 7,
    });
    const create = operation('POST', '/v1/mcp/upstreams')!.requestBody!.content!['application/json']!.schema!;
    expect(create.required).toEqual(expect.arrayContaining(['name', 'slug', 'url']));
    expect(
      operation('PATCH', '/v1/mcp/upstreams/:id')!.requestBody!.content!['application/json']!.schema!
        .required,
    ).toBeUndefined();
  });

  it('keeps what the routes enforce: string queries checked by the handler, url checked after the transport', async () => {
    const tenant = await createTenant(t);
    const list = await t.inject({
      method: 'GET',
      url: '/v1/decisions?limit=0',
      headers: keyHeader(tenant.apiKey),
    });
    expect([list.statusCode, list.json().error.message]).toEqual([
      400,
      'querystring/limit must be an integer from 1 to 100',
    ]);
    const kind = await t.inject({
      method: 'GET',
      url: '/v1/decisions?decision=maybe',
      headers: keyHeader(tenant.apiKey),
    });
    expect(kind.json().error.message).toBe(
      'querystring/decision must be one of allow, deny, require_approval',
    );
    const noUrl = await t.inject({
      method: 'POST',
      url: '/v1/mcp/upstreams',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'n', slug: 'no-url' },
    });
    expect([noUrl.statusCode, noUrl.json().error.message]).toEqual([400, 'body/url is required']);
  });
});
