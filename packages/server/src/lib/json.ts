import { CanonicalJsonError } from '../ledger/canonical.js';
import { AppError, invalid } from './errors.js';

/** How deep request JSON (`arguments`, `context`) may nest; the object itself is level 1. */
export const MAX_JSON_DEPTH = 64;

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

/** A JSON body nests at most this deep (the body is level 1), so each of its fields at most MAX_JSON_DEPTH. */
export const MAX_BODY_DEPTH = MAX_JSON_DEPTH + 1;

const MAX_KEY_IN_MESSAGE = 60;
const segment = (key: string) =>
  key.length > MAX_KEY_IN_MESSAGE ? `${key.slice(0, MAX_KEY_IN_MESSAGE)}…` : key;

/** String.prototype.isWellFormed (Node 20, not in the ES2023 lib types): false when a lone surrogate is in it. */
const wellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

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
  return withinLimits(body, maxDepth) ? null : describeProblem(body, maxDepth);
}

/** A string the stores can hold as sent: well-formed, and without U+0000 (PostgreSQL text refuses it). */
const storable = (s: string): boolean => wellFormed(s) && !s.includes('\u0000');

const scalarOk = (v: unknown): boolean =>
  typeof v === 'number' ? Number.isFinite(v) : typeof v !== 'string' || storable(v);

/** The pass every body takes (validate's included): no paths built, nothing allocated but the stack. */
function withinLimits(body: unknown, maxDepth: number): boolean {
  if (typeof body !== 'object' || body === null) return scalarOk(body);
  const values: object[] = [body];
  const depths: number[] = [1];
  while (values.length > 0) {
    const v = values.pop()!;
    const depth = depths.pop()!;
    if (depth > maxDepth) return false;
    const keys = Array.isArray(v) ? null : Object.keys(v);
    const n = keys ? keys.length : (v as unknown[]).length;
    for (let i = 0; i < n; i++) {
      const key = keys ? keys[i]! : i;
      if (typeof key === 'string' && !storable(key)) return false;
      const child = (v as Record<string | number, unknown>)[key];
      if (typeof child === 'object' && child !== null) {
        values.push(child);
        depths.push(depth + 1);
      } else if (!scalarOk(child)) return false;
    }
  }
  return true;
}

/** The same walk again, for a body known to break a limit: the message names where. */
function describeProblem(body: unknown, maxDepth: number): string | null {
  const own = leafProblem(body, 'body');
  if (own !== undefined) return own;
  if (typeof body !== 'object' || body === null) return null;
  const stack: [value: object, depth: number, path: string, field: string][] = [[body, 1, 'body', '']];
  while (stack.length > 0) {
    const [v, depth, path, field] = stack.pop()!;
    if (depth > maxDepth) {
      return field === ''
        ? `body is nested deeper than ${maxDepth} levels`
        : `body/${field} is nested deeper than ${maxDepth - 1} levels`;
    }
    const keys = Array.isArray(v) ? null : Object.keys(v);
    const n = keys ? keys.length : (v as unknown[]).length;
    for (let i = 0; i < n; i++) {
      const key = keys ? keys[i]! : i;
      if (typeof key === 'string' && !storable(key)) return `${path} has a key that ${unstorable(key)}`;
      const child = (v as Record<string | number, unknown>)[key];
      const name = segment(String(key));
      if (typeof child === 'object' && child !== null) {
        stack.push([child, depth + 1, `${path}/${name}`, depth === 1 ? name : field]);
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

/**
 * The error to answer when a decision could not be recorded: the client's data that cannot be
 * canonicalized is its mistake (400, do not retry); anything else is ours (503, retry).
 */
export function recordError(err: unknown, retryMessage: string): AppError {
  if (err instanceof CanonicalJsonError) return invalid(`The call cannot be recorded: ${err.message}`);
  return new AppError('service_unavailable', retryMessage);
}
