import type { ProviderName } from '../model.js';
import type { Exchange } from './fetch.js';

/**
 * Where the value at `path` (member names and array indexes from the root) sits in a JSON text, as
 * [start, end) offsets, or null when there is none. Of duplicate members the last one counts, as
 * JSON.parse reads them. The text is one the SDK has already parsed; anything unreadable gives null.
 * Iterative: a deeply nested answer cannot exhaust the stack.
 */
export function jsonValueSpan(
  text: string,
  path: readonly (string | number)[],
): { start: number; end: number } | null {
  interface Frame {
    object: boolean;
    key: string | null;
    index: number;
  }
  const frames: Frame[] = [];
  const atPath = () =>
    frames.length === path.length && frames.every((f, d) => (f.object ? f.key : f.index) === path[d]);
  let found: { start: number; end: number } | null = null;
  // Where the container at `path` now being read opened, or -1.
  let openAt = -1;
  let i = 0;
  try {
    while (i < text.length) {
      const c = text[i]!;
      const top = frames[frames.length - 1];
      if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === ':') {
        i++;
      } else if (c === ',') {
        if (top?.object) top.key = null;
        else if (top) top.index++;
        i++;
      } else if (c === '}' || c === ']') {
        frames.pop();
        if (openAt >= 0 && atPath()) {
          found = { start: openAt, end: i + 1 };
          openAt = -1;
        }
        i++;
      } else if (c === '{' || c === '[') {
        if (atPath()) openAt = i;
        frames.push({ object: c === '{', key: null, index: 0 });
        i++;
      } else if (c === '"') {
        let end = i + 1;
        while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
        end++;
        if (top?.object && top.key === null) top.key = JSON.parse(text.slice(i, end)) as string;
        else if (atPath()) found = { start: i, end };
        i = end;
      } else {
        // A number, true, false or null.
        let end = i;
        while (end < text.length && !' \t\n\r,:}]'.includes(text[end]!)) end++;
        if (atPath()) found = { start: i, end };
        i = end;
      }
    }
  } catch {
    return null;
  }
  return found;
}

/** Whether the request asked Anthropic for the answer through the SDK's "json" tool (no native structured output). */
function usedJsonTool(request: string | null): boolean {
  if (request === null) return false;
  try {
    const tools = (JSON.parse(request) as { tools?: unknown }).tools;
    return Array.isArray(tools) && tools.some((t) => (t as { name?: unknown } | null)?.name === 'json');
  } catch {
    return false;
  }
}

/** The raw answer cannot be told from the body (never seen; it would mean the SDK reads answers differently). */
export class UnlocatedAnswerError extends Error {}

/**
 * The model's answer text as it came over the wire, given the text the SDK made of it:
 *
 * - OpenAI (Chat Completions), Gemini, and Anthropic with native structured output: the SDK's text,
 *   which is the model's text as sent (the message content; the text parts, joined), JSON-decoded
 *   from the body's string.
 * - Anthropic through the "json" tool (models without native structured output, such as the default
 *   claude-3-5-haiku-latest): the answer is the tool call's `input` object, which the SDK parses and
 *   re-serializes (dropping duplicate members, whitespace, escapes). The raw answer is the `input`
 *   value's JSON text exactly as it appears in the body (several such calls: joined, in order).
 *   When the answer has no such call, the SDK reads its text blocks, and so does this.
 */
export function rawAnswerText(provider: ProviderName, exchange: Exchange, sdkText: string): string {
  if (provider !== 'anthropic' || !usedJsonTool(exchange.request)) return sdkText;
  const body = exchange.response;
  if (body === null) throw new UnlocatedAnswerError('no answer body was received');
  let content: unknown;
  try {
    content = (JSON.parse(body) as { content?: unknown }).content;
  } catch {
    content = null;
  }
  if (!Array.isArray(content)) throw new UnlocatedAnswerError('the answer has no content');
  const inputs: string[] = [];
  for (const [i, part] of content.entries()) {
    const p = part as { type?: unknown; name?: unknown } | null;
    if (p?.type !== 'tool_use' || p.name !== 'json') continue;
    const span = jsonValueSpan(body, ['content', i, 'input']);
    if (!span) throw new UnlocatedAnswerError('a json tool call has no input');
    inputs.push(body.slice(span.start, span.end));
  }
  if (inputs.length === 0) return sdkText;
  // The SDK's text is each input re-serialized: the slices must be what it was made from.
  if (inputs.map((s) => JSON.stringify(JSON.parse(s))).join('') !== sdkText) {
    throw new UnlocatedAnswerError('the json tool input in the body is not the answer the SDK read');
  }
  return inputs.join('');
}
