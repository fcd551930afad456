import { inspect } from 'node:util';
import { CONSTRAINT_FIELDS } from '@svc/policy-engine';
import type { CallContext, Client, ToolArgs, ValidationResult } from '@svc/sdk';
import { ApiError } from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../server/test/fixture.js';
import { ADMIN_TOKEN, bearer, keyHeader, type Tenant } from '../../server/test/helpers.js';
import { connectedClient, createTenant } from './live.js';

/*
 * Seeded differential test: many random policies (every constraint kind of @svc/policy-engine) and
 * many random calls aimed at edge cases, each decided by a connected SDK client and by POST
 * /v1/tools/validate of the same server, with the same key, for the JSON the SDK would send. A
 * local answer (`source: 'local'`) must be exactly the server's (decision, reason, failed
 * constraints); whatever the SDK cannot decide alone it must send to the server, whose answer (or
 * error) it then gives.
 *
 * Once the SDK's log is flushed, the decisions the service recorded must be exactly the answers
 * given (the SDK's local ones as logged: reason cut to 2000 units, `context.source: 'client'`).
 *
 * Policies: every constraint field (aliases beside their canonical bound, null fields, disabled and
 * no-op constraints, deny and require_approval), dotted names, inherited names (`constructor`,
 * `toString`), llm, inactive and session-limited policies, tools without a policy, and tool names
 * with path syntax, percent signs and Unicode. Calls: missing keys, null, wrong types, -0, NaN,
 * ±Infinity, 1e21, subnormals, Unicode (combining marks, astral, lone surrogates, NUL, U+2028),
 * long strings, `__proto__`/`constructor` keys, arrays for objects, Dates, toJSON (nested), boxed
 * values, Maps, typed arrays, holes, non-enumerable and symbol keys, proxies, null prototypes,
 * nesting and size near the service's limits, values JSON cannot write; contexts likewise.
 *
 * Deterministic: the seed is fixed unless SVC_DIFF_SEED is set, and printed with every failure.
 * SVC_DIFF_POLICIES and SVC_DIFF_CALLS change the size; SVC_DIFF_CASE runs one case of the run;
 * SVC_DIFF_TALLY prints how the calls were answered.
 */
const envNumber = (name: string, fallback: number) => {
  const v = process.env[name];
  return v === undefined || v === '' ? fallback : Number(v);
};
const SEED = envNumber('SVC_DIFF_SEED', 0x5eed2025) >>> 0;
const POLICIES = envNumber('SVC_DIFF_POLICIES', 80);
const CALLS_PER_POLICY = envNumber('SVC_DIFF_CALLS', 10);
const ONLY_CASE = process.env.SVC_DIFF_CASE ? Number(process.env.SVC_DIFF_CASE) : null;

/** mulberry32: a small, fast, seeded PRNG (32-bit state). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Rng {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  float(): number {
    return this.next();
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(list: readonly T[]): T {
    return list[this.int(list.length)]!;
  }
  /** Between min and max distinct items, in a random order. */
  some<T>(list: readonly T[], min: number, max: number): T[] {
    const pool = [...list];
    const n = Math.min(pool.length, min + this.int(max - min + 1));
    const out: T[] = [];
    for (let i = 0; i < n; i++) out.push(pool.splice(this.int(pool.length), 1)[0]!);
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Policies

/** Argument names policies constrain: plain, dotted (nested paths, array indexes), inherited names. */
const ARG_NAMES = [
  'amount',
  'amount',
  'name',
  'name',
  'tags',
  'currency',
  'p.q',
  'p.q',
  'items.0.sku',
  'a.b.c',
  'items.length',
  'constructor',
  'toString',
  'x',
] as const;

const BOUNDS = [
  0,
  -0,
  1,
  -1,
  0.5,
  0.1,
  0.30000000000000004,
  10,
  100,
  -100,
  123.456,
  2 ** 53,
  1e21,
  -1e21,
  5e-324,
  1e308,
  -1e308,
] as const;
const LENGTHS = [0, 1, 2, 3, 5, 40, 80, 100] as const;
const ITEM_COUNTS = [0, 1, 2, 3, 5] as const;

/** Strings for enum/notEnum lists and for values: normalization forms, astral, lookalike keys... */
const ENUM_STRINGS = [
  'a',
  'b',
  'USD',
  'usd',
  '',
  ' ',
  'é', // precomposed
  'e\u0301', // e + combining acute
  '😀',
  '👨‍👩‍👧',
  'a😀',
  'x'.repeat(100),
  '__proto__',
  'constructor',
  'toString',
  'A\u202eB',
  '\ufeffa',
  'line\u2028sep',
] as const;

/** Simple, safe RE2 patterns (one of them searched by the NFA, with a short input bound). */
const PATTERNS = [
  '^[a-z]+$',
  '^\\d{1,5}$',
  '(?i)^usd$',
  'drop\\s+table',
  '^.{0,3}$',
  '^.{2}$',
  '😀',
  '^\\p{L}+$',
  '\\x{1F600}',
  '^$',
  '(?s).',
  '^[^@]+@example\\.com$',
  '\\p{Mn}',
  'a.{20}$',
  '^e\u0301$',
  '^[\\x{0}-\\x{7F}]*$',
] as const;

/** The numeric bounds a constraint takes (aliases beside their canonical names). */
const NUMBER_FIELDS = CONSTRAINT_FIELDS.filter((f) => /^(minimum|maximum|greaterThan|lessThan)/.test(f));
/** Every field of a constraint but its argument name, as the engine knows them. */
const ALL_FIELDS = CONSTRAINT_FIELDS.filter((f) => f !== 'argumentName');

type Json = Record<string, unknown>;

function genConstraint(r: Rng): Json {
  const c: Json = { argumentName: r.pick(ARG_NAMES) };
  const kinds = r.some(
    ['required', 'notNull', 'range', 'length', 'enum', 'notEnum', 'regex', 'notRegex', 'items'],
    1,
    3,
  );
  for (const kind of kinds) {
    switch (kind) {
      case 'required':
        c.required = r.chance(0.85);
        break;
      case 'notNull':
        c.notNull = r.chance(0.85);
        break;
      case 'range':
        // Aliases beside their canonical field too: the tighter bound bites.
        for (const f of r.some(NUMBER_FIELDS, 1, 3)) c[f] = r.pick(BOUNDS);
        break;
      case 'length':
        if (r.chance(0.6)) c.minLength = r.pick(LENGTHS);
        if (r.chance(0.6) || c.minLength === undefined) c.maxLength = r.pick(LENGTHS);
        break;
      case 'enum':
        c.enum = r.some(ENUM_STRINGS, 0, 4);
        break;
      case 'notEnum':
        c.notEnum = r.some(ENUM_STRINGS, 1, 4);
        break;
      case 'regex':
        c.regex = r.pick(PATTERNS);
        break;
      case 'notRegex':
        c.notRegex = r.pick(PATTERNS);
        break;
      case 'items':
        if (r.chance(0.6)) c.minItems = r.pick(ITEM_COUNTS);
        if (r.chance(0.6) || c.minItems === undefined) c.maxItems = r.pick(ITEM_COUNTS);
        break;
    }
  }
  if (r.chance(0.35)) c.action = 'require_approval';
  else if (r.chance(0.15)) c.action = 'deny';
  if (r.chance(0.07)) c.enabled = false;
  else if (r.chance(0.05)) c.enabled = true;
  // null is "not set" in the API's bodies.
  if (r.chance(0.15)) {
    const unset = ALL_FIELDS.filter((f) => c[f] === undefined);
    c[r.pick(unset)] = null;
  }
  return c;
}

type PolicyKind = 'deterministic' | 'inactive' | 'llm' | 'session' | 'none';

interface PolicyCase {
  tool: string;
  kind: PolicyKind;
  /** The policy body written (none for `none`). */
  body: Json | null;
  /** The argument names its constraints read. */
  names: string[];
}

/**
 * Tool names, unique per policy: the SDK reads the policy at `/v1/policies/<encoded name>` while
 * validate carries the name in its body, so path syntax, percent signs and Unicode must find the same policy.
 */
const TOOL_NAMES: ((i: number) => string)[] = [
  (i) => `diff-${i}`,
  (i) => `diff-${i}`,
  (i) => `diff-${i}`,
  (i) => `a/${i}`,
  (i) => `${i}/..`,
  (i) => `./${i}`,
  (i) => `${i}?x=1`,
  (i) => `${i}#frag`,
  (i) => `${i}%2F`,
  (i) => `${i}%`,
  (i) => `${i} space`,
  (i) => `${i}+plus`,
  (i) => `..${i}`,
  (i) => `${i}.`,
  (i) => `é${i}`,
  (i) => `e\u0301${i}`,
  (i) => `😀${i}`,
  (i) => `${i}\\`,
  (i) => `${i};&=`,
  (i) => `DIFF-${i}`,
  (i) => `${i}`.padEnd(200, 'x'),
  (i) => `${i}${'😀'.repeat(99)}`,
];
/** Names a call may use but no policy can have: the service decides (or refuses) them. */
const CALL_ONLY_NAMES: ((i: number) => string)[] = [
  () => '.',
  () => '..',
  (i) => `${i}\u0001`,
  (i) => `${i}`.padEnd(201, 'x'),
  (i) => `\ud800${i}`,
  () => '',
];

function genPolicy(r: Rng, index: number): PolicyCase {
  const roll = r.float();
  const kind: PolicyKind =
    roll < 0.78
      ? 'deterministic'
      : roll < 0.85
        ? 'inactive'
        : roll < 0.9
          ? 'llm'
          : roll < 0.95
            ? 'session'
            : 'none';
  const tool = (kind === 'none' && r.chance(0.5) ? r.pick(CALL_ONLY_NAMES) : r.pick(TOOL_NAMES))(index);
  if (kind === 'none') return { tool, kind, body: null, names: r.some(ARG_NAMES, 1, 3) };
  const constraints = r.chance(0.04) ? [] : Array.from({ length: 1 + r.int(4) }, () => genConstraint(r));
  // A constraint that checks nothing.
  if (r.chance(0.05)) constraints.push({ argumentName: r.pick(ARG_NAMES), required: false });
  const names = [...new Set(constraints.map((c) => c.argumentName as string))];
  // An inactive policy of any mode: nothing of it applies.
  const mode = kind === 'llm' || (kind === 'inactive' && r.chance(0.3)) ? 'llm' : 'deterministic';
  if (mode === 'llm') {
    return {
      tool,
      kind,
      body: { mode: 'llm', llmConfig: { description: 'Refuse anything unusual' }, constraints },
      names,
    };
  }
  const body: Json = { mode: 'deterministic', constraints };
  if (kind === 'session' || (kind === 'inactive' && r.chance(0.3))) {
    const limitName = r.pick(ARG_NAMES);
    body.sessionConstraints = {
      ...(r.chance(0.5) ? { maxCalls: r.pick([0, 1, 5]) } : {}),
      cumulativeLimits: [{ argumentName: limitName, maxValue: r.pick(BOUNDS) }],
    };
    names.push(limitName);
  } else if (r.chance(0.1)) {
    body.sessionConstraints = r.pick([null, {}, { cumulativeLimits: [] }, { maxCalls: null }]);
  }
  return { tool, kind, body, names };
}

// ---------------------------------------------------------------------------------------------
// Values and calls

const NUMBERS = [
  0,
  -0,
  1,
  -1,
  0.5,
  0.1 + 0.2,
  0.3,
  10,
  100,
  100.00000000000001,
  99.99999999999999,
  101,
  123.456,
  1e21,
  -1e21,
  1e-7,
  5e-324,
  Number.MAX_VALUE,
  -Number.MAX_VALUE,
  2 ** 53 + 1,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
] as const;

/** Strings for values; the last ones are refused by the service (lone surrogates, NUL). */
const STRINGS = [
  ...ENUM_STRINGS,
  'abc',
  'abcdef',
  '12345',
  'drop  TABLE users',
  'DROP\ttable',
  'me@example.com',
  'e\u0301\u0301\u0301',
  '😀'.repeat(3),
  `a${'😀'.repeat(50)}`, // messages cut at 80 UTF-16 units: inside a surrogate pair
  `${'x'.repeat(79)}😀tail`,
  'x'.repeat(16_000), // past the NFA pattern's input bound
  '\u{10FFFF}',
  'tab\there',
  '\u007f',
  'ß',
  'İ',
  '\ud800',
  'a\udc00b',
  'nul\u0000',
] as const;

class Money {
  constructor(readonly value: number) {}
  toJSON() {
    return this.value;
  }
}
class Plain {
  amount = 5;
  name = 'abc';
}

/** A value of any kind, plain JSON data or not (Date, toJSON, NaN, boxed, sparse...). */
function genValue(r: Rng, depth = 0): unknown {
  const roll = r.float();
  if (roll < 0.3) return r.pick(NUMBERS);
  if (roll < 0.55) return r.pick(STRINGS);
  if (roll < 0.6) return r.chance(0.5);
  if (roll < 0.67) return null;
  if (roll < 0.8 && depth < 3) {
    switch (r.int(5)) {
      case 0:
        return [];
      case 1:
        return Array.from({ length: 1 + r.int(4) }, () => genValue(r, depth + 1));
      case 2:
        return [{ sku: genValue(r, depth + 1) }];
      case 3:
        return {};
      default:
        return { q: genValue(r, depth + 1), sku: r.pick(STRINGS) };
    }
  }
  return genExotic(r, depth);
}

/** JS values that are not their own JSON projection. */
function genExotic(r: Rng, depth: number): unknown {
  switch (r.int(22)) {
    case 0:
      return new Date(0);
    case 1:
      return new Date(Number.NaN); // toJSON: null
    case 2:
      return new Money(r.pick(NUMBERS));
    case 3: {
      // Drawn now: a toJSON is called more than once, and must answer the same each time.
      const s = r.pick(STRINGS);
      return { toJSON: () => s };
    }
    case 4:
      return { q: { toJSON: () => ({ q: 1 }) } }; // nested toJSON
    case 5:
      return new Map([['q', 1]]);
    case 6:
      return new String(r.pick(STRINGS));
    case 7:
      return new Number(r.pick(NUMBERS));
    case 8:
      return Uint8Array.of(1, 2, 3);
    case 9:
      return Symbol('s'); // left out of objects, null in arrays
    case 10:
      return () => 1; // likewise
    case 11: {
      // A hole: JSON writes null.
      const a: unknown[] = [1];
      a[2] = 'x';
      return a;
    }
    case 12: {
      const o: Json = { q: 1 };
      Object.defineProperty(o, 'hidden', { value: 2, enumerable: false });
      return o;
    }
    case 13:
      return { q: 1, [Symbol('k')]: 2 };
    case 14:
      return Object.assign(Object.create(null), { q: r.pick(NUMBERS) });
    case 15:
      return Object.create({ q: 1 }); // inherited only: `{}` in JSON
    case 16:
      return new Plain();
    case 17:
      return Object.freeze({ q: r.pick(STRINGS) });
    case 18:
      return new Proxy({ q: 1, sku: 'a' }, {});
    case 19: {
      const a = [1, 2];
      (a as unknown as Json).extra = 'x';
      return a;
    }
    case 20:
      return undefined;
    default:
      return depth < 3 ? [genExotic(r, depth + 1), r.pick(NUMBERS)] : new Date(1e12);
  }
}

/** Something JSON cannot write: the SDK must throw, never answer. */
function unserializable(r: Rng): Json {
  switch (r.int(3)) {
    case 0:
      return { amount: 10n };
    case 1: {
      const o: Json = { amount: 1 };
      o.self = o;
      return o;
    }
    default:
      return Object.defineProperty({ name: 'a' }, 'amount', {
        get() {
          throw new Error('no amount');
        },
        enumerable: true,
      });
  }
}

/** Sets one (possibly dotted) argument in `args`, as the exact key, the nested path, both, or neither. */
function setArgument(r: Rng, args: Json, name: string): void {
  const value = genValue(r);
  if (!name.includes('.')) {
    if (name === 'constructor' && r.chance(0.2)) {
      // The body parser refuses `constructor.prototype`.
      args[name] = { prototype: {} };
      return;
    }
    args[name] = value;
    return;
  }
  const parts = name.split('.');
  const mode = r.int(5);
  if (mode === 0 || mode === 2) args[name] = value;
  if (mode === 1 || mode === 2) {
    let at: Json = args;
    for (let i = 0; i < parts.length - 1; i++) {
      const part = parts[i]!;
      const nextIsIndex = /^\d+$/.test(parts[i + 1]!);
      const existing = at[part];
      if (typeof existing !== 'object' || existing === null) {
        at[part] = nextIsIndex && r.chance(0.7) ? [] : {};
      }
      at = at[part] as Json;
    }
    // An array's `length` is its own: left as it is (the dotted name reads it).
    if (!(Array.isArray(at) && parts.at(-1) === 'length')) {
      at[parts.at(-1)!] = mode === 2 && r.chance(0.5) ? genValue(r) : value;
    }
  }
  if (mode === 3) args[parts[0]!] = r.pick([null, 5, 'str', [], [[]], { other: 1 }]);
  // mode 4: absent
}

function nest(value: unknown, levels: number): unknown {
  let v = value;
  for (let i = 0; i < levels; i++) v = { n: v };
  return v;
}

interface CallCase {
  index: number;
  policy: PolicyCase;
  args: unknown;
  context: unknown;
  /** What the service gets for the server-side check: the same context but another session id. */
  serverContext: unknown;
  /** Near the log record's limits: the SDK may leave a call the service accepts to the service. */
  nearLimit: boolean;
  /** JSON cannot write it: the SDK must throw. */
  unserializable: boolean;
}

const EXTRA_KEYS = ['', 'zzz', 'a.b', 'q', 'items', 'p', 'hasOwnProperty', 'valueOf', '__defineGetter__'];

function genArgs(r: Rng, policy: PolicyCase): { args: unknown; nearLimit: boolean; unserializable: boolean } {
  if (r.chance(0.015)) return { args: unserializable(r), nearLimit: false, unserializable: true };
  let args: Json = {};
  for (const name of policy.names) if (r.chance(0.8)) setArgument(r, args, name);
  for (const name of r.some(ARG_NAMES, 0, 1)) setArgument(r, args, name);
  for (const key of r.some(EXTRA_KEYS, 0, 1)) args[key] = genValue(r);
  let nearLimit = false;
  const special = r.float();
  if (special < 0.02) {
    // `__proto__` as an own key: the service refuses it.
    Object.defineProperty(args, '__proto__', {
      value: genValue(r),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else if (special < 0.05) {
    // Arguments levels + 1 deep: up to 64 (63 levels under `deep`) decided locally; 65: refused.
    const levels = r.pick([60, 61, 62, 63, 64]);
    args.deep = nest(r.pick([1, 'x', null]), levels);
  } else if (special < 0.065) {
    // Past the SDK's record bound (the body limit less 16 KiB), within or past the body limit.
    args.blob = 'x'.repeat(r.pick([1_040_000, 1_100_000]));
    nearLimit = true;
  } else if (special < 0.08) {
    // A key the engine reads but JSON leaves out (non-enumerable), hostile when read.
    const name = r.pick([...policy.names, 'amount']);
    if (!name.includes('.')) {
      const hidden = r.chance(0.5)
        ? { value: genValue(r), enumerable: false }
        : {
            get() {
              throw new Error('read');
            },
            enumerable: false,
          };
      Object.defineProperty(args, name, { ...hidden, configurable: true });
    }
  } else if (special < 0.09) {
    args = { ...args, [Symbol('secret')]: 1 };
  } else if (special < 0.1) {
    // More keys than the log keeps as a slab (255): kept as JSON text instead.
    for (let i = 0; i < 300; i++) args[`k${i}`] = i % 3 === 0 ? `v${i}` : i;
  }
  // The whole arguments object in another shape.
  const wrap = r.float();
  let whole: unknown = args;
  if (wrap < 0.02) whole = Object.assign(Object.create(null), args);
  else if (wrap < 0.04) whole = { toJSON: () => args };
  else if (wrap < 0.05) whole = { toJSON: () => 'not an object' };
  else if (wrap < 0.06) whole = r.pick([null, undefined, [], [args], 'str', 5, new Date(0)]);
  else if (wrap < 0.07) whole = Object.freeze(args);
  else if (wrap < 0.08) whole = new Proxy(args, {});
  else if (wrap < 0.09) whole = Object.assign(new Plain(), args);
  return { args: whole, nearLimit, unserializable: false };
}

function genContext(r: Rng): unknown {
  const roll = r.float();
  if (roll < 0.45) return undefined;
  if (roll < 0.5) return null;
  if (roll < 0.6) return {};
  if (roll < 0.7) return { agent_id: r.pick(STRINGS.slice(0, 12)) };
  if (roll < 0.76) return { approval_id: r.pick(['01900000-0000-7000-8000-000000000000', 'nope']) };
  if (roll < 0.8) return { approval_id: r.pick(['', 5, null, undefined]) };
  if (roll < 0.82) return { agent_id: 'a', extra: genValue(r) };
  if (roll < 0.84) return { source: r.pick(['client', 'server', 5]) };
  if (roll < 0.87) return { approval_id: { toJSON: () => 'via-toJSON' } };
  if (roll < 0.9) return r.pick(['str', 5, [], new Date(0)]);
  if (roll < 0.93) return { agent_id: r.pick(['\ud800', 'nul\u0000']) };
  if (roll < 0.96) return new Plain();
  return { session_id: `s-${r.int(1e9)}` };
}

function genCases(seed: number): { policies: PolicyCase[]; cases: CallCase[] } {
  const r = new Rng(seed);
  const policies = Array.from({ length: POLICIES }, (_, i) => genPolicy(r, i));
  const cases: CallCase[] = [];
  for (let round = 0; round < CALLS_PER_POLICY; round++) {
    for (const policy of policies) {
      const index = cases.length;
      const { args, nearLimit, unserializable } = genArgs(r, policy);
      let context = genContext(r);
      let serverContext = context;
      if (policy.kind === 'session') {
        // Session counters are the server's: each path gets a fresh session.
        context = { session_id: `s-${seed}-${index}-sdk` };
        serverContext = { session_id: `s-${seed}-${index}-server` };
      }
      cases.push({ index, policy, args, context, serverContext, nearLimit, unserializable });
    }
  }
  return { policies, cases };
}

// ---------------------------------------------------------------------------------------------
// The run

const t = useTestApp({}, { listen: true });
let tenant: Tenant;
let client: Client;
const clientErrors: Error[] = [];
const { policies, cases } = genCases(SEED);

beforeAll(async () => {
  tenant = await createTenant(t);
  // Approvals on (require_approval is answered as such), and no rate limit in the way.
  const res = await t.inject({
    method: 'PATCH',
    url: `/v1/admin/organizations/${tenant.orgId}`,
    headers: bearer(ADMIN_TOKEN),
    payload: { tier: 'enterprise', rateLimitPerMinute: 1_000_000 },
  });
  if (res.statusCode !== 200) throw new Error(`tier change failed: ${res.body}`);
  for (const p of policies) {
    if (p.body === null) continue;
    const made = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: p.tool, ...p.body },
    });
    if (made.statusCode !== 201) throw new Error(`policy ${JSON.stringify(p.tool)} refused: ${made.body}`);
    if (p.kind === 'inactive') {
      const off = await t.inject({
        method: 'POST',
        url: `/v1/policies/${encodeURIComponent(p.tool)}/deactivate`,
        headers: keyHeader(tenant.apiKey),
      });
      if (off.statusCode !== 200) throw new Error(`deactivate failed: ${off.body}`);
    }
  }
  client = await connectedClient(t.url, tenant, { onError: (err) => clientErrors.push(err) });
});
afterAll(async () => {
  await client?.close();
});

const shape = (r: Pick<ValidationResult, 'decision' | 'reason' | 'failedConstraints'>) => ({
  decision: r.decision,
  reason: r.reason,
  failedConstraints: r.failedConstraints,
});

const show = (v: unknown) =>
  inspect(v, { depth: 6, showHidden: true, maxStringLength: 120, maxArrayLength: 10, breakLength: 200 });

/** The JSON projection of a value, or `unserializable`. */
function projection(v: unknown): unknown {
  try {
    const text = JSON.stringify(v);
    return text === undefined ? undefined : JSON.parse(text);
  } catch {
    return 'unserializable';
  }
}

/** Objects with their keys sorted, for comparing JSON data whatever its key order. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (typeof v !== 'object' || v === null) return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) out[k] = canonical((v as Record<string, unknown>)[k]);
  return out;
}

/** The reason a local decision is logged with (README: cut to 2000 UTF-16 units, well-formed). */
function loggedReason(reason: string): string {
  let r = reason;
  if (r.length > 2000) {
    const high = r.charCodeAt(1999) >= 0xd800 && r.charCodeAt(1999) <= 0xdbff;
    r = r.slice(0, high ? 1999 : 2000);
  }
  return (r as unknown as { toWellFormed(): string }).toWellFormed();
}

/**
 * The decisions the service should hold once the SDK's log is flushed, as sorted keys: the test's
 * own validations, the SDK's server decisions, and its local ones (logged by the SDK).
 */
const expectedRecords: string[] = [];
const recordKey = (tool: string, decision: string, reason: string, args: unknown, context: unknown) =>
  JSON.stringify([tool, decision, reason, canonical(args), canonical(context)]);

/** How the cases were answered: the run must reach each path, or it proves little. */
const tally = { local: 0, server: 0, refused: 0, thrown: 0, allow: 0, deny: 0, require_approval: 0 };

async function runCase(c: CallCase): Promise<string | null> {
  const { policy } = c;
  const where = () =>
    [
      `case ${c.index} (seed ${SEED}; rerun with SVC_DIFF_SEED=${SEED} SVC_DIFF_CASE=${c.index})`,
      `  policy ${JSON.stringify(policy.tool)} [${policy.kind}]: ${JSON.stringify(policy.body)}`,
      `  args: ${show(c.args)}`,
      `  context: ${show(c.context)}`,
    ].join('\n');

  let sdk: ValidationResult | undefined;
  let sdkError: unknown;
  try {
    sdk = await client.validate(policy.tool, c.args as ToolArgs, c.context as CallContext);
  } catch (err) {
    sdkError = err;
  }

  // What the SDK sends (viaServer): null context is no context.
  const serverContext = c.serverContext ?? undefined;
  let body: string;
  try {
    body = JSON.stringify({
      tool_name: policy.tool,
      arguments: c.args,
      ...(serverContext !== undefined ? { context: serverContext } : {}),
    });
  } catch {
    if (sdk !== undefined)
      return `${where()}\n  JSON cannot write the call, yet the SDK answered ${show(sdk)}`;
    if (!c.unserializable) return `${where()}\n  unexpectedly unserializable`;
    tally.thrown++;
    return null;
  }
  if (c.unserializable) return `${where()}\n  expected to be unserializable`;
  const res = await t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: { ...keyHeader(tenant.apiKey), 'content-type': 'application/json' },
    payload: body,
  });

  if (res.statusCode !== 200) {
    // Refused by the service: the SDK must have asked it, and thrown its error.
    if (sdk !== undefined) {
      return `${where()}\n  server answered ${res.statusCode} ${res.body.slice(0, 300)}\n  SDK answered ${show(sdk)}`;
    }
    if (!(sdkError instanceof ApiError) || sdkError.status !== res.statusCode) {
      return `${where()}\n  server answered ${res.statusCode} ${res.body.slice(0, 300)}\n  SDK threw ${show(sdkError)}`;
    }
    tally.refused++;
    return null;
  }
  const server = res.json();
  if (sdk === undefined) {
    return `${where()}\n  server answered ${res.body.slice(0, 500)}\n  SDK threw ${show(sdkError)}`;
  }
  const expected = shape({
    decision: server.decision,
    reason: server.reason,
    failedConstraints: server.failed_constraints ?? [],
  });
  try {
    expect(shape(sdk)).toEqual(expected);
  } catch {
    return `${where()}\n  SDK (${sdk.source}): ${show(shape(sdk))}\n  server: ${show(expected)}`;
  }

  // Where the SDK must decide alone: a policy it caches, an outcome that needs no approval, and a
  // call whose record fits the log.
  const ctx = projection(c.context ?? undefined) as { approval_id?: unknown } | undefined;
  // `.` and `..` cannot be read at /v1/policies/<name> (URLs resolve them away): the service decides.
  const cacheable =
    (policy.kind === 'deterministic' || policy.kind === 'inactive' || policy.kind === 'none') &&
    policy.tool !== '.' &&
    policy.tool !== '..';
  const mustBeLocal =
    cacheable &&
    !c.nearLimit &&
    (server.decision === 'allow' || (server.decision === 'deny' && ctx?.approval_id === undefined));
  const mustBeServer = !cacheable || server.decision === 'require_approval';
  if (mustBeLocal && sdk.source !== 'local') return `${where()}\n  decided by the server, not locally`;
  if (mustBeServer && sdk.source !== 'server') return `${where()}\n  decided locally: ${show(sdk)}`;
  tally[sdk.source]++;
  tally[sdk.decision]++;
  const args = projection(c.args);
  // A call without context is recorded with `{}`; `context.source` says `client` exactly for the
  // decisions the SDK logged (api-notes).
  const recordedContext = (v: unknown, logged: boolean) => {
    const { source, ...rest } = (projection(v ?? undefined) ?? {}) as Record<string, unknown>;
    if (logged) return { ...rest, source: 'client' };
    return source === 'client' || source === undefined ? rest : { ...rest, source };
  };
  expectedRecords.push(
    recordKey(policy.tool, server.decision, server.reason, args, recordedContext(c.serverContext, false)),
  );
  const local = sdk.source === 'local';
  expectedRecords.push(
    recordKey(
      policy.tool,
      sdk.decision,
      local ? loggedReason(sdk.reason) : sdk.reason,
      args,
      recordedContext(c.context, local),
    ),
  );
  return null;
}

/** What the service recorded is what was answered: the SDK's log carries its local decisions faithfully. */
async function checkRecords(): Promise<void> {
  const recorded: string[] = [];
  for (let offset = 0; ; offset += 100) {
    const res = await t.inject({
      method: 'GET',
      url: `/v1/decisions?limit=100&offset=${offset}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(res.statusCode).toBe(200);
    const page = res.json() as {
      data: { toolName: string; decision: string; reason: string; arguments: unknown; context: unknown }[];
      pagination: { hasMore: boolean };
    };
    for (const d of page.data) {
      recorded.push(recordKey(d.toolName, d.decision, d.reason, d.arguments, d.context));
    }
    if (!page.pagination.hasMore) break;
  }
  // Multisets: every expected record once, nothing else (refused calls record nothing).
  const left = new Map<string, number>();
  for (const k of recorded) left.set(k, (left.get(k) ?? 0) + 1);
  const missing: string[] = [];
  for (const k of expectedRecords) {
    const n = left.get(k) ?? 0;
    if (n === 0) missing.push(k);
    else left.set(k, n - 1);
  }
  const extra = [...left].filter(([, n]) => n > 0).map(([k]) => k);
  const cut = (list: string[]) => list.slice(0, 5).map((k) => (k.length > 600 ? `${k.slice(0, 600)}…` : k));
  expect({ missing: cut(missing), extra: cut(extra) }, `seed ${SEED}: recorded decisions`).toEqual({
    missing: [],
    extra: [],
  });
}

describe(`SDK vs server, randomized (seed ${SEED})`, () => {
  it(`decides ${cases.length} random calls on ${policies.length} random policies as the server does`, async () => {
    const failures: string[] = [];
    for (const c of cases) {
      if (ONLY_CASE !== null && c.index !== ONLY_CASE) continue;
      const failure = await runCase(c);
      if (failure !== null) failures.push(failure);
    }
    await client.flush();
    const shown = failures.slice(0, 15).join('\n\n');
    expect(failures.length, `seed ${SEED}: ${failures.length} divergences\n\n${shown}`).toBe(0);
    // The local decisions were all recorded: none was refused by the log.
    expect(clientErrors.map(String), `seed ${SEED}`).toEqual([]);
    if (failures.length === 0) await checkRecords();
    if (ONLY_CASE === null && process.env.SVC_DIFF_TALLY) console.log(`seed ${SEED}`, tally);
    if (ONLY_CASE === null && POLICIES * CALLS_PER_POLICY >= 300) {
      // Every path is exercised: local and server decisions, each outcome, refusals and throws.
      expect(tally.local, `seed ${SEED}`).toBeGreaterThan(cases.length / 4);
      for (const n of Object.values(tally))
        expect(n, `seed ${SEED}: ${JSON.stringify(tally)}`).toBeGreaterThan(0);
    }
  }, 120_000);
});
