import {
  codePointLength,
  jsonDataSize,
  MAX_BODY_BYTES,
  MAX_JSON_DEPTH,
  utf8Length,
  wellFormed,
} from '@svc/policy-engine';
import type { CallContext, ToolArgs } from './model.js';

/**
 * How deep arguments and context of a local decision may nest: exactly as deep as the service takes
 * them, in POST /v1/tools/validate (level 2 of a body that may nest MAX_BODY_DEPTH levels) and in a
 * log request (level 3 of an array of decisions, which may nest one level more): MAX_JSON_DEPTH,
 * the object itself being level 1.
 */
const MAX_INPUT_DEPTH = MAX_JSON_DEPTH;

/**
 * JSON bytes the arguments and context of a local decision may take, so that its log record alone
 * fits the body limit: the rest of it is at most the tool name (200 characters), the reason (2000
 * UTF-16 units) — each unit at most 6 bytes of JSON — and the fixed fields.
 */
const MAX_INPUT_BYTES = MAX_BODY_BYTES - 16 * 1024;

/** The arguments and context as the service sees them (their JSON projection), with their JSON text. */
export interface Projected {
  args: ToolArgs;
  context: CallContext | undefined;
  argsText: string;
  ctxText: string | undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * True when the call can be decided on the caller's objects as they are: they are plain JSON data
 * (their own JSON projection) that the service accepts and the log can record. The hot path: no
 * allocation beyond the key lists, no serialization. False says nothing more: see project().
 */
export function plainInput(args: ToolArgs, context: CallContext | undefined): boolean {
  const size = jsonDataSize(args, MAX_INPUT_DEPTH, MAX_INPUT_BYTES);
  if (size < 0) return false;
  return (
    context === undefined ||
    (isObject(context) && jsonDataSize(context, MAX_INPUT_DEPTH, MAX_INPUT_BYTES - size) >= 0)
  );
}

/** Decide on the caller's own objects: they are their own JSON projection. */
export const AS_IS = Symbol('as is');

/**
 * What a local decision of the call is taken on: the caller's objects (AS_IS), their JSON
 * projection, or nothing (null): the service would refuse the call, or could not record its
 * decision, so only the service may answer it. Throws for what cannot be JSON (see project()).
 */
export function localInput(
  args: ToolArgs,
  context: CallContext | undefined,
): typeof AS_IS | Projected | null {
  return plainInput(args, context) ? AS_IS : project(args, context);
}

/**
 * The JSON projection of a call that is not plain (a Date, NaN, a toJSON, a non-enumerable key...):
 * what the service would be sent and the log records, so what a local decision must be taken on.
 * Null when the service would refuse it, or could not record its decision (a NUL or a lone
 * surrogate, too deep, too large, a `__proto__` key, arguments or context that are no object): such
 * a call is left to the service, which answers its error. Throws, as JSON.stringify does, for what
 * cannot be JSON at all (a cycle, a BigInt, a getter that throws).
 */
export function project(args: ToolArgs, context: CallContext | undefined): Projected | null {
  const argsText = JSON.stringify(args) as string | undefined;
  // A context that JSON leaves out (a function) is left out of the request body too.
  const ctxText = context === undefined ? undefined : (JSON.stringify(context) as string | undefined);
  if (argsText === undefined) return null;
  const bytes = utf8Length(argsText) + (ctxText === undefined ? 0 : utf8Length(ctxText));
  if (bytes > MAX_INPUT_BYTES) return null;
  const a: unknown = JSON.parse(argsText);
  const c: unknown = ctxText === undefined ? undefined : JSON.parse(ctxText);
  if (!isObject(a) || jsonDataSize(a, MAX_INPUT_DEPTH, Number.POSITIVE_INFINITY) < 0) return null;
  if (c !== undefined && (!isObject(c) || jsonDataSize(c, MAX_INPUT_DEPTH, Number.POSITIVE_INFINITY) < 0)) {
    return null;
  }
  return { args: a, context: c as CallContext | undefined, argsText, ctxText };
}

/**
 * The service's rule for a called tool's name (1-200 characters, none of them U+0000-U+001F, and
 * well-formed): a call to another name is refused, so it is never decided here.
 */
export function validToolName(name: string): boolean {
  if (typeof name !== 'string' || name.length === 0 || codePointLength(name) > 200) return false;
  for (let i = 0; i < name.length; i++) if (name.charCodeAt(i) < 0x20) return false;
  return wellFormed(name);
}
