import { hash } from 'node:crypto';
import canonicalizeModule from 'canonicalize';

type Canonicalize = (input: unknown) => string | undefined;

// The package is CommonJS (`module.exports = fn`) but its types declare `export default`, so under
// NodeNext the default import is typed as the module object. At runtime it is the function.
const canonicalize: Canonicalize =
  typeof canonicalizeModule === 'function'
    ? (canonicalizeModule as unknown as Canonicalize)
    : (canonicalizeModule as unknown as { default: Canonicalize }).default;

/** `sha256:` followed by 64 zeros: the previous_receipt_hash of the first receipt of a chain. */
export const GENESIS_HASH = `sha256:${'0'.repeat(64)}`;

const TAGGED_HASH_RE = /^sha256:[0-9a-f]{64}$/;

export class CanonicalJsonError extends Error {
  override name = 'CanonicalJsonError';
}

/** True for `sha256:` + 64 lowercase hex digits, the only hash spelling receipts use. */
export function isTaggedHash(s: unknown): s is string {
  return typeof s === 'string' && TAGGED_HASH_RE.test(s);
}

/** Tags a raw 32-byte digest as `sha256:<hex>`. */
export function tagDigest(digest: Uint8Array): string {
  return `sha256:${Buffer.from(digest.buffer, digest.byteOffset, digest.byteLength).toString('hex')}`;
}

/** Inverse of tagDigest; throws on anything that is not a tagged SHA-256 hash. */
export function untagDigest(tagged: string): Buffer {
  if (!isTaggedHash(tagged)) throw new Error(`not a sha256:<64 hex> hash: ${JSON.stringify(tagged)}`);
  return Buffer.from(tagged.slice(7), 'hex');
}

/** SHA-256 of the bytes (strings are hashed as UTF-8), tagged `sha256:<hex>`. */
export function sha256Tagged(data: string | Uint8Array): string {
  return `sha256:${hash('sha256', data, 'hex')}`;
}

/** What plainCanonical returns for a value it does not handle (canonicalJson then checks it). */
export const NOT_PLAIN = Symbol('not plain');
const MAX_FAST_DEPTH = 200;

/**
 * RFC 8785 for plain JSON data (objects, arrays, strings, finite numbers, booleans, null) in one
 * pass: keys sorted by UTF-16 code units, numbers and strings as ECMAScript's JSON.stringify writes
 * them, which is what RFC 8785 prescribes. Anything else (toJSON, Map, NaN, very deep nesting,
 * a cycle) returns NOT_PLAIN and takes the checked path, which explains what is wrong.
 */
export function plainCanonical(value: unknown, depth = 0): string | typeof NOT_PLAIN {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      return Number.isFinite(value) ? JSON.stringify(value) : NOT_PLAIN;
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      break;
    default:
      return NOT_PLAIN;
  }
  if (value === null) return 'null';
  if (depth > MAX_FAST_DEPTH) return NOT_PLAIN;
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      const item = value[i] === undefined ? 'null' : plainCanonical(value[i], depth + 1);
      if (item === NOT_PLAIN) return NOT_PLAIN;
      out += i === 0 ? item : `,${item}`;
    }
    return `${out}]`;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return NOT_PLAIN;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).sort();
  let out = '{';
  let first = true;
  for (const key of keys) {
    const v = obj[key];
    if (v === undefined) continue;
    const item = plainCanonical(v, depth + 1);
    if (item === NOT_PLAIN) return NOT_PLAIN;
    out += `${first ? '' : ','}${JSON.stringify(key)}:${item}`;
    first = false;
  }
  return `${out}}`;
}

/**
 * RFC 8785 canonical JSON. canonicalize silently emits invalid output for some inputs (a function
 * property becomes the text `undefined`, a cycle overflows the stack, a Map becomes `{}`), so the
 * value is checked first and anything JSON cannot carry faithfully is rejected with its path.
 * Like JSON.stringify, undefined object properties are omitted and undefined array items become null.
 */
export function canonicalJson(value: unknown): string {
  const fast = plainCanonical(value, 0);
  if (fast !== NOT_PLAIN) return fast;
  assertRepresentable(value, '$', new Set());
  let out: string | undefined;
  try {
    out = canonicalize(value);
  } catch (err) {
    throw new CanonicalJsonError(`cannot canonicalize: ${(err as Error).message}`);
  }
  if (typeof out !== 'string') throw new CanonicalJsonError('cannot canonicalize: value has no JSON form');
  return out;
}

/** sha256Tagged(canonicalJson(value)). */
export function hashJson(value: unknown): string {
  return sha256Tagged(canonicalJson(value));
}

function assertRepresentable(value: unknown, path: string, ancestors: Set<object>): void {
  const bad = (what: string) => new CanonicalJsonError(`cannot canonicalize ${path}: ${what}`);
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw bad(`${value} is not a JSON number`);
      return;
    case 'undefined':
      // Only reachable at the top level or via toJSON; properties and array items are handled below.
      throw bad('undefined has no JSON form');
    case 'bigint':
      throw bad('BigInt has no JSON form (convert it to a string or number first)');
    case 'function':
    case 'symbol':
      throw bad(`a ${typeof value} has no JSON form`);
  }
  if (value === null) return;
  const obj = value as Record<string, unknown>;
  if (typeof obj['toJSON'] === 'function') {
    // canonicalize serializes toJSON() output (e.g. Date -> ISO string), so check that instead.
    assertRepresentable((obj['toJSON'] as () => unknown)(), path, ancestors);
    return;
  }
  if (obj instanceof Map || obj instanceof Set)
    throw bad(`a ${obj.constructor.name} would silently become {}`);
  if (ancestors.has(obj)) throw bad('circular reference');
  ancestors.add(obj);
  if (Array.isArray(obj)) {
    obj.forEach((item, i) => {
      if (item !== undefined) assertRepresentable(item, `${path}[${i}]`, ancestors);
    });
  } else {
    for (const key of Object.keys(obj)) {
      if (obj[key] !== undefined) assertRepresentable(obj[key], `${path}.${key}`, ancestors);
    }
  }
  ancestors.delete(obj);
}
