import { describe, expect, it } from 'vitest';
import { SseLines } from './sse-lines.js';

/**
 * The lines of `chunks` as SseLines finds them, each as `line|"line end"` (a line's parts in several
 * chunks joined, the LF skipped at the start of a chunk given back to its CR); `line…` for one
 * that does not end.
 */
function linesOf(chunks: (string | Uint8Array)[]): string[] {
  const lines = new SseLines();
  const decoder = new TextDecoder();
  const text = (chunk: string | Uint8Array, from: number, to?: number) =>
    // Byte ranges are decoded in order, so a character split between chunks is decoded whole.
    typeof chunk === 'string'
      ? chunk.slice(from, to)
      : decoder.decode(chunk.subarray(from, to), { stream: true });
  const found: { line: string; end: string }[] = [];
  let partial = '';
  for (const chunk of chunks) {
    if (lines.start(chunk)) found.at(-1)!.end += '\n';
    while (lines.next()) {
      found.push({
        line: partial + text(chunk, lines.from, lines.to),
        end: text(chunk, lines.to, lines.after),
      });
      partial = '';
    }
    partial += text(chunk, lines.after);
  }
  const out = found.map(({ line, end }) => `${line}|${JSON.stringify(end)}`);
  return partial === '' ? out : [...out, `${partial}…`];
}

describe('SSE line ends (SseLines)', () => {
  // Every kind of line end, blank lines of each, and a line that does not end.
  const text = 'event: message\r\ndata: 1\r\n\r\ndata: 2\n\ndata: 3\r\rdata: 4\r\n\n\r: é\rx';
  const expected = [
    'event: message|"\\r\\n"',
    'data: 1|"\\r\\n"',
    '|"\\r\\n"',
    'data: 2|"\\n"',
    '|"\\n"',
    'data: 3|"\\r"',
    '|"\\r"',
    'data: 4|"\\r\\n"',
    '|"\\n"',
    '|"\\r"',
    ': é|"\\r"',
    'x…',
  ];

  it('finds the same lines in text and in its bytes, wherever the chunks split', () => {
    const bytes = new TextEncoder().encode(text);
    for (let at = 0; at <= text.length; at++)
      expect({ at, lines: linesOf([text.slice(0, at), text.slice(at)]) }).toEqual({ at, lines: expected });
    for (let at = 0; at <= bytes.length; at++)
      expect({ at, lines: linesOf([bytes.subarray(0, at), bytes.subarray(at)]) }).toEqual({
        at,
        lines: expected,
      });
  });

  it('reads a CR ending a chunk and an LF starting the next as one CRLF, empty chunks between included', () => {
    const lines = new SseLines();
    lines.start('data: 1\r');
    expect([lines.next(), lines.from, lines.to, lines.after]).toEqual([true, 0, 7, 8]);
    expect(lines.next()).toBe(false);
    lines.start('');
    expect(lines.next()).toBe(false);
    // The LF is skipped (start says so): no line end of its own, so no blank line.
    expect(lines.start('\ndata: 2\n')).toBe(true);
    expect([lines.next(), lines.from, lines.to, lines.after]).toEqual([true, 1, 8, 9]);
    // A CR in the middle of a chunk leaves nothing pending: an LF starting the next chunk is a line end.
    lines.start('\r\rx');
    expect([lines.next(), lines.next(), lines.next()]).toEqual([true, true, false]);
    expect(lines.start('\n')).toBe(false);
    expect([lines.next(), lines.from, lines.to, lines.after]).toEqual([true, 0, 0, 1]);
  });
});
