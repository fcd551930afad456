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
