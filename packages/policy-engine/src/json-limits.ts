/**
 * What the service refuses in the JSON it is sent, in one place: the server answers 400 for it, and
 * the SDK must not decide locally a call whose decision the server would then refuse to record.
 */

/** How deep request JSON (`arguments`, `context`) may nest; the object itself is level 1. */
export const MAX_JSON_DEPTH = 64;

/** A JSON body nests at most this deep (the body is level 1), so each of its fields at most MAX_JSON_DEPTH. */
export const MAX_BODY_DEPTH = MAX_JSON_DEPTH + 1;

/** The largest request body the service reads (bytes of UTF-8); a larger one is answered 413. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Whether `value` nests deeper than `max` levels of objects/arrays. Iterative: no stack to overflow. */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

const MAX_KEY_IN_MESSAGE = 60;
const segment = (key: string) =>
  key.length > MAX_KEY_IN_MESSAGE ? `${key.slice(0, MAX_KEY_IN_MESSAGE)}…` : key;

/** String.prototype.isWellFormed (ES2024, not in the ES2023 lib types): false when a lone surrogate is in it. */
export const wellFormed = (s: string): boolean =>
  (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/** A string the stores can hold as sent: well-formed, and without U+0000 (PostgreSQL text refuses it). */
export const storable = (s: string): boolean => wellFormed(s) && !s.includes('\u0000');

const scalarOk = (v: unknown): boolean =>
  typeof v === 'number' ? Number.isFinite(v) : typeof v !== 'string' || storable(v);

/**
 * The first thing in a parsed request body that no later step may meet, or null (I-JSON, RFC 7493, plus a
 * depth bound): nesting deeper than MAX_BODY_DEPTH (recursive code downstream — schema validation,
 * copies, canonical JSON — would overflow the stack), a number that overflowed to ±Infinity (`1e999`:
 * JSON has no such value, and storing it would silently make it null), or a string or key holding a lone
 * surrogate (`"\ud800"`: the UTF-8 stores would silently replace it, so a name could not be found again)
 * or U+0000 (PostgreSQL text cannot hold it; a value SQLite kept would differ between the stores).
 * Iterative, so no input can overflow it either.
 */
export function bodyJsonProblem(body: unknown, maxDepth = MAX_BODY_DEPTH): string | null {
  return walk(body, maxDepth, false, Number.POSITIVE_INFINITY) >= 0 ? null : describeProblem(body, maxDepth);
}

/**
 * The same checks for a value held as JavaScript rather than parsed from JSON (the SDK, before it
 * decides a call locally). It answers an upper bound of the UTF-8 size of the value's JSON text when
 * the value is plain JSON data — what JSON.parse could have returned, so the value is its own JSON
 * projection (objects with Object.prototype or no prototype and only enumerable own string keys,
 * arrays without holes, strings, finite numbers other than -0, booleans, null; undefined members of
 * objects, which JSON leaves out and the engine reads as absent) — within the limits of
 * bodyJsonProblem at `maxDepth`, without a key the body parser refuses (`__proto__`, or `constructor`
 * holding an object with a `prototype` key), and the bound is at most `maxBytes`. Else -1, which
 * does not mean the service refuses the value: a Date, NaN, a class instance or a toJSON are merely
 * not plain. Project those (`JSON.parse(JSON.stringify(value))`) and check the projection.
 */
export function jsonDataSize(value: unknown, maxDepth: number, maxBytes: number): number {
  return walk(value, maxDepth, true, maxBytes);
}

/** How many bytes `s` takes in UTF-8 (a lone surrogate as the 3 bytes of U+FFFD, as encoders write it). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) {
      n += 1;
      continue;
    }
    n += 2;
    // A surrogate pair: 4 bytes for its 2 units.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return n;
}

const OBJECT_PROTO = Object.prototype as { toJSON?: unknown };
const ARRAY_PROTO = Array.prototype as { toJSON?: unknown };
/** The longest JSON text of a number: `-1.2345678901234567e-308`. */
const MAX_NUMBER_BYTES = 25;
/** The most bytes one UTF-16 unit takes in JSON text: `\u001f`. */
const MAX_UNIT_BYTES = 6;

/**
 * The JSON size bound of a scalar member of an object (`inObject`, where undefined is left out) or
 * an array item or a whole value (where undefined is not JSON), or -1 when it is not plain JSON data
 * or not within the limits.
 */
function scalarSize(v: unknown, inObject: boolean): number {
  switch (typeof v) {
    case 'string':
      return storable(v) ? MAX_UNIT_BYTES * v.length + 2 : -1;
    case 'number':
      // -0 is written as 0: not its own projection.
      return Number.isFinite(v) && (v !== 0 || 1 / v > 0) ? MAX_NUMBER_BYTES : -1;
    case 'boolean':
      return 5;
    case 'undefined':
      return inObject ? 0 : -1;
    default:
      return v === null ? 4 : -1;
  }
}

/**
 * The one pass over a value. Not `strict` (the server's pass over every parsed body): the limits,
 * answering 0 or -1, nothing allocated but the stack. `strict`: also plain JSON data and the
 * parser's forbidden keys, answering the size bound (see jsonDataSize).
 */
function walk(root: unknown, maxDepth: number, strict: boolean, maxBytes: number): number {
  if (typeof root !== 'object' || root === null) {
    if (!strict) return scalarOk(root) ? 0 : -1;
    const size = scalarSize(root, false);
    return size <= maxBytes ? size : -1;
  }
  // JSON.stringify calls a toJSON it finds on the prototypes too.
  if (strict && (OBJECT_PROTO.toJSON !== undefined || ARRAY_PROTO.toJSON !== undefined)) return -1;
  let size = 0;
  // The containers still to visit with their depths, allocated only when there is one: most calls
  // pass a flat object.
  let stack: (object | number)[] | null = null;
  let v: object = root;
  let depth = 1;
  for (;;) {
    if (depth > maxDepth) return -1;
    if (Array.isArray(v)) {
      const n = v.length;
      if (strict) {
        if (!plainArray(v)) return -1;
        size += n + 2;
      }
      for (let i = 0; i < n; i++) {
        const child: unknown = v[i];
        if (typeof child === 'object' && child !== null) {
          if (stack === null) stack = [];
          stack.push(child, depth + 1);
        } else if (strict) {
          const s = scalarSize(child, false);
          if (s < 0) return -1;
          size += s;
        } else if (!scalarOk(child)) return -1;
      }
    } else {
      const keys = Object.keys(v);
      const n = keys.length;
      if (strict) {
        if (!plainObject(v, n)) return -1;
        size += n + 2;
      }
      for (let i = 0; i < n; i++) {
        const key = keys[i]!;
        if (!storable(key)) return -1;
        const child = (v as Record<string, unknown>)[key];
        if (strict) {
          if (key === '__proto__') return -1;
          size += MAX_UNIT_BYTES * key.length + 3;
        }
        if (typeof child === 'object' && child !== null) {
          if (strict && key === 'constructor' && Object.hasOwn(child, 'prototype')) return -1;
          if (stack === null) stack = [];
          stack.push(child, depth + 1);
        } else if (strict) {
          const s = scalarSize(child, true);
          if (s < 0) return -1;
          size += s;
        } else if (!scalarOk(child)) return -1;
      }
    }
    if (size > maxBytes) return -1;
    if (stack === null || stack.length === 0) return size;
    depth = stack.pop() as number;
    v = stack.pop() as object;
  }
}

/**
 * An object that JSON writes with exactly the members the engine reads: of Object.prototype or
 * none (not a Date, Map or class instance), without non-enumerable own keys (the engine would read
 * them, JSON not).
 */
function plainObject(v: object, enumerable: number): boolean {
  const proto = Object.getPrototypeOf(v);
  return (
    (proto === Object.prototype || proto === null) && Object.getOwnPropertyNames(v).length === enumerable
  );
}

/** An array of Array.prototype with no member beyond its items (and `length`). */
function plainArray(v: unknown[]): boolean {
  return (
    Object.getPrototypeOf(v) === Array.prototype && Object.getOwnPropertyNames(v).length === v.length + 1
  );
}

/** The same walk again, for a body known to break a limit: the message names where. */
function describeProblem(body: unknown, maxDepth: number): string | null {
  const own = leafProblem(body, 'body');
  if (own !== undefined) return own;
  if (typeof body !== 'object' || body === null) return null;
  // The field named: a member of the body, or of an item of a body that is an array (a batch).
  const fieldDepth = Array.isArray(body) ? 2 : 1;
  const stack: [value: object, depth: number, path: string, field: string][] = [[body, 1, 'body', '']];
  while (stack.length > 0) {
    const [v, depth, path, field] = stack.pop()!;
    if (depth > maxDepth) {
      return field === ''
        ? `body is nested deeper than ${maxDepth} levels`
        : `body/${field} is nested deeper than ${maxDepth - fieldDepth} levels`;
    }
    const keys = Array.isArray(v) ? null : Object.keys(v);
    const n = keys ? keys.length : (v as unknown[]).length;
    for (let i = 0; i < n; i++) {
      const key = keys ? keys[i]! : i;
      if (typeof key === 'string' && !storable(key)) return `${path} has a key that ${unstorable(key)}`;
      const child = (v as Record<string | number, unknown>)[key];
      const name = segment(String(key));
      if (typeof child === 'object' && child !== null) {
        const named = depth === 1 ? name : depth === fieldDepth ? `${field}/${name}` : field;
        stack.push([child, depth + 1, `${path}/${name}`, named]);
        continue;
      }
      const problem = leafProblem(child, `${path}/${name}`);
      if (problem !== undefined) return problem;
    }
  }
  return null;
}

const unstorable = (s: string) =>
  wellFormed(s)
    ? 'contains U+0000 (NUL), which no stored value may hold'
    : 'is not well-formed Unicode (a lone surrogate such as \\ud800)';

/** The problem of a scalar, undefined when it has none (or is not a scalar). */
function leafProblem(value: unknown, path: string): string | undefined {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    return `${path} is a number outside the range of JSON numbers accepted (a finite double, at most ±${Number.MAX_VALUE})`;
  }
  if (typeof value === 'string' && !storable(value)) return `${path} ${unstorable(value)}`;
  return undefined;
}
