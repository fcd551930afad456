import { isObject } from './jsonrpc.js';

/**
 * Nesting depth counted on JSON text, before it is parsed. JSON.parse of a text nested millions
 * deep (8 MB of brackets) holds the event loop for seconds, so a depth bound checked on the parsed
 * value comes too late. One pass over the brackets outside strings; strings are skipped with
 * indexOf, so text content costs next to nothing. None of this checks syntax: JSON.parse still does.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

/** The index of the quote that closes the string opening at `open`, or `to` when none does. */
function stringEnd(text: string, open: number, to: number): number {
  let i = open;
  for (;;) {
    i = text.indexOf('"', i + 1);
    if (i < 0 || i >= to) return to;
    // Escaped when an odd number of backslashes precede it (the opening quote stops the walk).
    let b = i - 1;
    while (text.charCodeAt(b) === BACKSLASH) b--;
    if ((i - 1 - b) % 2 === 0) return i;
  }
}

/** Whether the JSON text in [from, to) nests objects/arrays deeper than `max` (its outermost is level 1). */
export function textNestedDeeperThan(text: string, max: number, from = 0, to = text.length): boolean {
  let depth = 0;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i, to);
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > max) return true;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
  }
  return false;
}

/**
 * The top level of a JSON object text, every value nested in it replaced by null: what names a
 * message refused for its depth (`jsonrpc`, `id`, `method`) without parsing its nesting. Null when
 * that is not a JSON object.
 */
export function topLevelOf(text: string, from = 0, to = text.length): Record<string, unknown> | null {
  let out = '';
  let copied = from;
  let depth = 0;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i, to);
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth === 2) out += `${text.slice(copied, i)}null`;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      if (depth-- === 2) copied = i + 1;
    }
  }
  if (depth > 1) return null;
  out += text.slice(copied, to);
  try {
    const value: unknown = JSON.parse(out);
    return isObject(value) ? value : null;
  } catch {
    return null;
  }
}

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** Whether [from, to) of the text is JSON whitespace only. */
function blank(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isSpace(text.charCodeAt(i))) return false;
  return true;
}

/**
 * The [start, end) ranges of the elements of the JSON array text opening at `open`. An element that
 * is missing (`[,1]`, `[1,,2]`, a trailing comma) is a SyntaxError, as JSON.parse has it.
 */
function elementsOf(text: string, open: number): [number, number][] {
  const ranges: [number, number][] = [];
  let start = open + 1;
  let depth = 1;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i, text.length);
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
    else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      if (--depth === 0) {
        // `[]` has no element; after a comma, one must come.
        if (!blank(text, start, i)) ranges.push([start, i]);
        else if (ranges.length > 0) throw new SyntaxError('Unexpected "]" after "," in the JSON array');
        if (!blank(text, i + 1, text.length)) throw new SyntaxError('Unexpected text after the JSON array');
        return ranges;
      }
    } else if (c === 0x2c && depth === 1) {
      if (blank(text, start, i)) throw new SyntaxError('Unexpected "," in the JSON array');
      ranges.push([start, i]);
      start = i + 1;
    }
  }
  throw new SyntaxError('Unterminated JSON array');
}

/** One message of an upstream's JSON text: parsed, or (nested past the bound) only its top level. */
export type RawMessage =
  | { tooDeep: false; message: unknown }
  | { tooDeep: true; top: Record<string, unknown> | null };

const firstChar = (text: string): number => {
  for (let i = 0; i < text.length; i++) if (!isSpace(text.charCodeAt(i))) return i;
  return -1;
};

const isBatch = (text: string, open: number): boolean => open >= 0 && text.charCodeAt(open) === OPEN_BRACKET;

/** Whether the JSON text is a batch: a top-level array (whose elements are the messages). */
export const isBatchText = (text: string): boolean => isBatch(text, firstChar(text));

/**
 * Whether the JSON text of a message, or of a batch (a top-level array, whose elements are the
 * messages), holds a message nested deeper than `maxDepth` (the message is level 1).
 */
export function messageNestedDeeperThan(text: string, maxDepth: number): boolean {
  return textNestedDeeperThan(text, isBatch(text, firstChar(text)) ? maxDepth + 1 : maxDepth);
}

/**
 * The messages of one JSON text (a message, or a batch: the elements of a top-level array), each
 * parsed only when it nests at most `maxDepth` deep (the message is level 1). Throws a SyntaxError
 * when the text is not JSON.
 */
export function parseMessages(text: string, maxDepth: number): RawMessage[] {
  const open = firstChar(text);
  const batch = isBatch(text, open);
  if (!textNestedDeeperThan(text, batch ? maxDepth + 1 : maxDepth)) {
    const parsed: unknown = JSON.parse(text);
    if (!Array.isArray(parsed)) return [{ tooDeep: false, message: parsed }];
    return parsed.map((message) => ({ tooDeep: false, message }));
  }
  if (!batch) return [{ tooDeep: true, top: topLevelOf(text) }];
  return elementsOf(text, open).map(([from, to]) =>
    textNestedDeeperThan(text, maxDepth, from, to)
      ? { tooDeep: true, top: topLevelOf(text, from, to) }
      : { tooDeep: false, message: JSON.parse(text.slice(from, to)) },
  );
}
