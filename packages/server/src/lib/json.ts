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

/**
 * The first thing in a parsed request body that no later step may meet, or null: nesting deeper than
 * MAX_BODY_DEPTH (recursive code downstream — schema validation, copies, canonical JSON — would
 * overflow the stack) or a number that overflowed to ±Infinity (`1e999`: JSON has no such value, and
 * storing it would silently turn it into null). Iterative, so no input can overflow it either.
 */
export function bodyJsonProblem(body: unknown): string | null {
  if (typeof body === 'number' && !Number.isFinite(body)) return nonFinite('body');
  if (typeof body !== 'object' || body === null) return null;
  const stack: [value: object, depth: number, path: string, field: string][] = [[body, 1, 'body', '']];
  while (stack.length > 0) {
    const [v, depth, path, field] = stack.pop()!;
    if (depth > MAX_BODY_DEPTH) {
      return field === ''
        ? `body is nested deeper than ${MAX_BODY_DEPTH} levels`
        : `body/${field} is nested deeper than ${MAX_JSON_DEPTH} levels`;
    }
    const keys = Array.isArray(v) ? null : Object.keys(v);
    const n = keys ? keys.length : (v as unknown[]).length;
    for (let i = 0; i < n; i++) {
      const key = keys ? keys[i]! : i;
      const child = (v as Record<string | number, unknown>)[key];
      if (typeof child === 'number') {
        if (!Number.isFinite(child)) return nonFinite(`${path}/${segment(String(key))}`);
      } else if (typeof child === 'object' && child !== null) {
        const name = segment(String(key));
        stack.push([child, depth + 1, `${path}/${name}`, depth === 1 ? name : field]);
      }
    }
  }
  return null;
}

const nonFinite = (path: string) =>
  `${path} is a number outside the range of JSON numbers accepted (a finite double, at most ±${Number.MAX_VALUE})`;

/** 400 validation_failed naming the first body field that nests deeper than MAX_JSON_DEPTH. */
export function assertJsonDepth(fields: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(fields)) {
    if (nestedDeeperThan(value, MAX_JSON_DEPTH)) {
      throw invalid(`body/${name} is nested deeper than ${MAX_JSON_DEPTH} levels`);
    }
  }
}

/**
 * The error to answer when a decision could not be recorded: the client's data that cannot be
 * canonicalized is its mistake (400, do not retry); anything else is ours (503, retry).
 */
export function recordError(err: unknown, retryMessage: string): AppError {
  if (err instanceof CanonicalJsonError) return invalid(`The call cannot be recorded: ${err.message}`);
  return new AppError('service_unavailable', retryMessage);
}
