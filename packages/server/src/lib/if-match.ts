import { invalid } from './errors.js';

/**
 * The one entity tag an If-Match header names (quoted, or bare); none for `*` or no header (no
 * precondition). A list, or a weak `W/` tag (the tags here are compared strongly, so a weak one
 * could never match), answers 400. `what` names the resource in those messages ("the draft").
 */
export function ifMatchOf(header: string | undefined, what: string): string | undefined {
  const v = header?.trim();
  if (!v || v === '*') return undefined;
  if (v.includes(',')) throw invalid(`If-Match takes one ETag of ${what}`);
  if (v.startsWith('W/')) throw invalid(`If-Match takes the strong ETag of ${what}, not a weak one`);
  return v.length >= 2 && v.startsWith('"') && v.endsWith('"') ? v.slice(1, -1) : v;
}
