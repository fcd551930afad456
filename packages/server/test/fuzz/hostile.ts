import fc from 'fast-check';
import { fromSchema, type JsonSchema } from './schema-arbitrary.js';

/** A route as registered: method, URL template (`/v1/policies/:toolName`) and its schemas. */
export interface RouteSpec {
  method: string;
  url: string;
  schema: { body?: JsonSchema; querystring?: JsonSchema; params?: JsonSchema };
}

/** Credentials to try; `own` marks those under which the attacker may legitimately change its data. */
export interface Auth {
  label: string;
  headers: Record<string, string>;
  own: boolean;
}

/** Names and ids the generator mixes into paths, queries and bodies: both tenants' real ones. */
export interface Pools {
  ids: string[];
  toolNames: string[];
  orgSlugs: string[];
  upstreamSlugs: string[];
  /** Ids and names the attacker keeps (organization, project, key, upstream, tool, draft): a run keeps its reach. */
  keep: Set<string>;
}

export interface HostileRequest {
  route: string;
  method: string;
  url: string;
  auth: string;
  own: boolean;
  headers: Record<string, string>;
  payload?: string | Buffer;
}

const deep = (n: number, open = '[', close = ']') => `${open.repeat(n)}1${close.repeat(n)}`;

/** JSON text put where a value goes: out-of-range numbers, bad strings, prototype keys, deep nesting. */
const RAW_VALUES = [
  '1e999',
  '-1e999',
  '1e308',
  '-0',
  '123456789012345678901234567890',
  '5e-324',
  '"\\ud800"',
  '"x\\udc00"',
  '"\\u0000"',
  '"\\u001f\\n"',
  '{"__proto__":{"polluted":true}}',
  '{"constructor":{"prototype":{"polluted":true}}}',
  '{"__proto__":null}',
  deep(64),
  deep(65),
  deep(66),
  deep(1000),
  deep(10_000),
  deep(100_000),
  deep(2000, '{"a":', '}'),
  `"${'x'.repeat(100_000)}"`,
  `[${'1,'.repeat(50_000)}1]`,
];

/** Whole bodies that are not acceptable JSON at all. */
const BROKEN_BODIES: (string | Buffer)[] = [
  '',
  ' ',
  '{',
  '{"a":',
  '[1,]',
  'NaN',
  'Infinity',
  'undefined',
  "{'a':1}",
  '{"a":1}garbage',
  '\uFEFF{}',
  'null',
  '"string"',
  '[]',
  '0',
  Buffer.from([0xff, 0xfe, 0x7b, 0x7d]),
  Buffer.from('{"name":"\xc0\xae"}', 'latin1'),
  Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xe2, 0x82, 0x22, 0x7d]),
  `{"pad":"${'x'.repeat(1024 * 1024)}"}`,
];

const HOSTILE_VALUES: unknown[] = [
  null,
  true,
  false,
  0,
  -1,
  1.5,
  2 ** 53 + 1,
  -1e308,
  '',
  ' ',
  'x'.repeat(5000),
  [],
  {},
  [null],
  { a: null },
  '\u0000',
  '😀',
  '../..',
  '%ff',
  '00000000-0000-0000-0000-000000000000',
  'svc_notakey',
];

/** Path parameter text as sent (already encoded): broken escapes, traversal, NUL, lengths at the limits. */
const RAW_PARAMS = [
  '%ff',
  '%',
  '%C0%AE',
  '%ED%A0%80',
  '%E0%A4%A',
  '%00',
  '%0a',
  '..',
  '%2e%2e',
  '%2F',
  '%25',
  'a'.repeat(200),
  'a'.repeat(201),
  'a'.repeat(1024),
  'a'.repeat(1025),
  'a'.repeat(5000),
  '%F0%9F%98%80'.repeat(100),
];

const CONTENT_TYPES = [
  'text/plain',
  'application/x-www-form-urlencoded',
  'application/json; charset=utf-16',
  'application/JSON',
  'application/jsonx',
  'multipart/form-data; boundary=x',
  '*/*',
];

const MARK = '\u0002HOSTILE\u0002';

function clone<T>(v: T): T {
  return v === undefined ? v : JSON.parse(JSON.stringify(v));
}

/** The number of nodes of a JSON value (the value itself included). */
function countNodes(v: unknown): number {
  if (typeof v !== 'object' || v === null) return 1;
  let n = 1;
  for (const c of Object.values(v)) n += countNodes(c);
  return n;
}

/** A copy with the node at pre-order position `index` replaced (the root when index is 0). */
function replaceAt(v: unknown, index: number, by: unknown): unknown {
  let i = index;
  const walk = (node: unknown): unknown => {
    if (i-- === 0) return by;
    if (typeof node !== 'object' || node === null) return node;
    if (Array.isArray(node)) return node.map(walk);
    return Object.fromEntries(Object.entries(node).map(([k, c]) => [k, walk(c)]));
  };
  return walk(v);
}

const encode = (s: string) => {
  try {
    return encodeURIComponent(s);
  } catch {
    return '%ED%A0%80'; // a lone surrogate, as a client that encodes UTF-16 blindly would send it
  }
};

/** A body for the route: mostly its schema's values, then mutated in one of several hostile ways. */
function bodyArb(route: RouteSpec, pools: Pools): fc.Arbitrary<string | Buffer | undefined> {
  const ids = fc.constantFrom(...pools.ids, ...pools.toolNames);
  const hint = (key: string) => {
    if (/(^id|Id|_id)$/.test(key)) return fc.constantFrom(...pools.ids);
    if (key === 'ids') return fc.array(fc.constantFrom(...pools.ids), { minLength: 1, maxLength: 3 });
    if (/^(toolName|tool_name|name)$/.test(key)) return fc.constantFrom(...pools.toolNames);
    return undefined;
  };
  const base = fromSchema(route.schema.body, 0, hint).map(clone);
  const nodeOf = (v: unknown) => fc.nat({ max: countNodes(v) - 1 });
  const hostile = fc.oneof(fc.constantFrom(...HOSTILE_VALUES), ids, fc.jsonValue({ maxDepth: 2 }));
  const mutated = base.chain((v) =>
    fc.tuple(nodeOf(v), hostile).map(([at, by]) => JSON.stringify(replaceAt(v, at, by)) ?? 'null'),
  );
  const injected = base.chain((v) =>
    fc
      .tuple(nodeOf(v), fc.constantFrom(...RAW_VALUES))
      .map(([at, raw]) => (JSON.stringify(replaceAt(v, at, MARK)) ?? '').replace(JSON.stringify(MARK), raw)),
  );
  const protoKey = base.map((v) =>
    (JSON.stringify(v) ?? '{}').replace(/^\{/, '{"__proto__":{"polluted":true},').replace(/,\}$/, '}'),
  );
  const hasBody = route.schema.body !== undefined || ['POST', 'PUT', 'PATCH'].includes(route.method);
  return fc.oneof(
    { weight: hasBody ? 1 : 6, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: base.map((v) => JSON.stringify(v) ?? 'null') },
    { weight: 3, arbitrary: mutated },
    { weight: 3, arbitrary: injected },
    { weight: 1, arbitrary: protoKey },
    { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
    { weight: 2, arbitrary: fc.constantFrom(...BROKEN_BODIES) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
  );
}

/** The path: each `:param` from the pools, random text, or raw broken encodings; sometimes reshaped. */
function pathArb(route: RouteSpec, pools: Pools): fc.Arbitrary<string> {
  const destructive = route.method === 'DELETE' || /\/(revoke|regenerate-key)$/.test(route.url);
  // An upstream whose URL a run could point anywhere would make later calls wait on DNS.
  const movesUpstream = route.method === 'PATCH' && route.url.startsWith('/v1/mcp/upstreams');
  const kept = (v: string) => (destructive || movesUpstream) && pools.keep.has(v);
  const ids = pools.ids.filter((id) => !kept(id));
  const poolFor = (name: string): string[] => {
    if (name === 'toolName' || name === 'name') return pools.toolNames.filter((n) => !kept(n));
    if (name === 'slug') return pools.orgSlugs;
    if (name === 'upstreamSlug') return [...pools.upstreamSlugs, 'charter', 'upstreams'];
    return ids;
  };
  const segments = route.url.split('/').map((seg) => {
    if (!seg.startsWith(':')) return fc.constant(seg);
    return fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...poolFor(seg.slice(1))).map(encode) },
      { weight: 1, arbitrary: fc.uuid() },
      { weight: 2, arbitrary: fc.string({ maxLength: 40, unit: 'binary' }).map(encode) },
      { weight: 2, arbitrary: fc.constantFrom(...RAW_PARAMS) },
    );
  });
  return fc
    .tuple(fc.tuple(...segments), fc.nat({ max: 19 }), fc.constantFrom(...RAW_PARAMS))
    .map(([parts, shape, raw]) => {
      const path = parts.join('/');
      if (shape === 0) return `${path}/`;
      if (shape === 1) return path.replace('/v1/', '//v1/');
      if (shape === 2) return `${path}/${raw}`;
      if (shape === 3) return path.toUpperCase();
      return path;
    });
}

/** The query string: the schema's parameters (ids from the pools) plus hostile extras. */
function queryArb(route: RouteSpec, pools: Pools): fc.Arbitrary<string> {
  const schema = route.schema.querystring;
  const keys = Object.keys(schema?.properties ?? {});
  const value = fc.oneof(
    fc.constantFrom(...pools.ids, ...pools.toolNames).map(encode),
    fc.constantFrom(
      '1e999',
      '-1',
      '0',
      '1.5',
      'abc',
      '',
      '%ff',
      '99999999999999999999',
      'true',
      'null',
      '2026-13-45',
    ),
    fc.string({ maxLength: 20 }).map(encode),
  );
  const schemaValue = fromSchema(schema).map((v) =>
    Object.entries((v ?? {}) as Record<string, unknown>)
      .map(([k, x]) => `${encode(k)}=${encode(typeof x === 'string' ? x : JSON.stringify(x))}`)
      .join('&'),
  );
  const extra = fc.array(
    fc
      .tuple(
        fc.oneof(
          fc.constantFrom(...keys, '__proto__', 'constructor', 'a[b]', '%ff', 'limit'),
          fc.string({ maxLength: 8 }).map(encode),
        ),
        value,
      )
      .map(([k, v]) => `${k}=${v}`),
    { maxLength: 3 },
  );
  return fc
    .tuple(schemaValue, extra, fc.boolean())
    .map(([base, more, withBase]) =>
      [...(withBase ? [base] : []), ...more].filter((s) => s !== '').join('&'),
    );
}

/** One hostile request for the route. */
export function requestArb(route: RouteSpec, pools: Pools, auths: Auth[]): fc.Arbitrary<HostileRequest> {
  const method = fc.oneof(
    { weight: 12, arbitrary: fc.constant(route.method) },
    { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD') },
  );
  const contentType = fc.oneof(
    { weight: 12, arbitrary: fc.constant('application/json') },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
  );
  const orgHeader = fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constantFrom(...pools.ids, 'not-an-id', '') },
  );
  return fc
    .record({
      method,
      path: pathArb(route, pools),
      query: queryArb(route, pools),
      payload: bodyArb(route, pools),
      // Mostly the attacker's own credentials, so requests get past auth into the routes.
      auth: fc.oneof(...auths.map((a) => ({ weight: a.own ? 4 : 1, arbitrary: fc.constant(a) }))),
      contentType,
      orgHeader,
      requestId: fc.oneof(fc.constant(undefined), fc.constantFrom('x'.repeat(200), 'a b', '\u00e9', 'ok-id')),
    })
    .map((r) => {
      const headers: Record<string, string> = { ...r.auth.headers };
      if (r.payload !== undefined && r.contentType) headers['content-type'] = r.contentType;
      if (r.orgHeader !== undefined) headers['x-organization-id'] = r.orgHeader;
      if (r.requestId !== undefined) headers['x-request-id'] = r.requestId;
      return {
        route: `${route.method} ${route.url}`,
        method: r.method,
        url: r.query ? `${r.path}?${r.query}` : r.path,
        auth: r.auth.label,
        // A changed x-organization-id points the attacker's user elsewhere: not its own request then.
        own: r.auth.own && r.orgHeader === undefined,
        headers,
        ...(r.payload === undefined ? {} : { payload: r.payload }),
      };
    });
}
