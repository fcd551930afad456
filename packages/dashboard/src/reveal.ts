/**
 * Text that agents supply (tool names, arguments, agent and session ids, drafts, reasons) shown as it
 * really is. Characters that render as nothing or change how the rest reads (bidi overrides and
 * isolates, zero-width characters, other format characters, C0 and C1 controls, line and paragraph
 * separators, lone surrogates, fillers) appear escaped, `\u202E`; a long run of spaces appears as
 * `⟨140 spaces⟩` instead of pushing what follows out of sight; arguments longer than LONG_VALUE
 * characters are marked with their length. Every page shows such text through these helpers (and the
 * components of Reveal.tsx), so a person approves what the agent sent, not what it made them see.
 */

/**
 * Invisible or reordering characters: controls (Cc), format characters (Cf: bidi embeddings, overrides
 * and isolates, zero-width space/joiners, marks, word joiner, BOM, soft hyphen, tags), lone surrogates
 * (Cs), U+2028/U+2029, and the blank letters and fillers that are not in those categories (combining
 * grapheme joiner, Hangul fillers, Braille blank, variation selectors 17-256).
 */
const HIDDEN_CLASS =
  '\\p{Cc}\\p{Cf}\\p{Cs}\\p{Zl}\\p{Zp}\\u034F\\u115F\\u1160\\u2800\\u3164\\uFFA0\\u{E0100}-\\u{E01EF}';
/** The same, less line breaks and tabs (which multi-line text and JSON keep or show themselves). */
const HIDDEN_BUT_LAYOUT = new RegExp(`(?![\\n\\r\\t])[${HIDDEN_CLASS}]`, 'u');

/** A run of this many spaces (any Unicode space) or more is shown as a count. */
export const SPACE_RUN = 8;
/** A string argument longer than this is marked with its length. */
export const LONG_VALUE = 500;

const SPACES = `\\p{Zs}{${SPACE_RUN},}`;

export interface Piece {
  text: string;
  /** Set for what the page shows in place of the original: an escaped character or a count. */
  kind?: 'escape' | 'spaces' | 'long';
}

export interface Revealed {
  pieces: Piece[];
  /** Whether an invisible character was escaped (line breaks and tabs of multi-line text aside). */
  hidden: boolean;
  /** Whether a run of spaces was replaced by its count. */
  spaces: boolean;
}

const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** `\u202E`, `\u{E0041}` for characters beyond the BMP, `\n` `\r` `\t` for those three. */
export function escapeChar(ch: string): string {
  const named = NAMED[ch];
  if (named) return named;
  const cp = ch.codePointAt(0) ?? 0;
  const hex = cp.toString(16).toUpperCase();
  return cp > 0xffff ? `\\u{${hex}}` : `\\u${hex.padStart(4, '0')}`;
}

/**
 * `text` in pieces to show: escaped invisible characters and counted runs of spaces marked. With
 * `multiline`, line breaks and tabs stay as they are (descriptions, replies).
 */
export function reveal(text: string, { multiline = false }: { multiline?: boolean } = {}): Revealed {
  const hiddenClass = multiline ? `(?![\\n\\r\\t])[${HIDDEN_CLASS}]` : `[${HIDDEN_CLASS}]`;
  const pattern = new RegExp(`(${SPACES})|(${hiddenClass})`, 'gu');
  const pieces: Piece[] = [];
  let hidden = false;
  let spaces = false;
  let last = 0;
  const plain = (s: string) => {
    if (!s) return;
    const prev = pieces.at(-1);
    if (prev && !prev.kind) prev.text += s;
    else pieces.push({ text: s });
  };
  for (const m of text.matchAll(pattern)) {
    plain(text.slice(last, m.index));
    if (m[1] !== undefined) {
      spaces = true;
      pieces.push({ text: `⟨${[...m[1]].length} spaces⟩`, kind: 'spaces' });
    } else {
      hidden = true;
      pieces.push({ text: escapeChar(m[2]!), kind: 'escape' });
    }
    last = m.index + m[0].length;
  }
  plain(text.slice(last));
  return { pieces, hidden, spaces };
}

/** `text` as one string, escaped and with runs of spaces counted (for labels and titles). */
export function revealString(text: string, options?: { multiline?: boolean }): string {
  return reveal(text, options)
    .pieces.map((p) => p.text)
    .join('');
}

export interface Inspection {
  /** Some string (or key) holds an invisible character. */
  hidden: boolean;
  /** Some string (or key) holds a run of SPACE_RUN spaces or more. */
  spaces: boolean;
}

/** Whether any string in `values` (searched through arrays and objects, keys too) would be revealed. */
export function inspect(...values: unknown[]): Inspection {
  const found: Inspection = { hidden: false, spaces: false };
  const spaceRun = new RegExp(SPACES, 'u');
  const visit = (v: unknown, depth: number) => {
    if (typeof v === 'string') {
      if (HIDDEN_BUT_LAYOUT.test(v)) found.hidden = true;
      if (spaceRun.test(v)) found.spaces = true;
    } else if (v && typeof v === 'object' && depth < 200) {
      for (const [k, x] of Object.entries(v)) {
        if (!Array.isArray(v)) visit(k, depth + 1);
        visit(x, depth + 1);
      }
    }
  };
  for (const v of values) visit(v, 0);
  return found;
}

/** Whether `text` holds an invisible character (line breaks and tabs aside). */
export const hasHidden = (text: string): boolean => HIDDEN_BUT_LAYOUT.test(text);

export interface JsonView extends Revealed {
  /** Where the string values longer than LONG_VALUE are, e.g. `cmd` or `items[2].note`, with their length. */
  long: { path: string; length: number }[];
}

/**
 * `value` (parsed JSON) written as JSON.stringify writes it (pretty with `indent` 2, on one line with
 * 0), its strings and keys revealed, each string longer than LONG_VALUE followed by its length.
 * Without anything to reveal the text is exactly JSON.stringify's.
 */
export function jsonPieces(value: unknown, { indent = 2 }: { indent?: 0 | 2 } = {}): JsonView {
  const out: JsonView = { pieces: [], hidden: false, spaces: false, long: [] };
  const plain = (s: string) => {
    const prev = out.pieces.at(-1);
    if (prev && !prev.kind) prev.text += s;
    else out.pieces.push({ text: s });
  };
  const string = (s: string, path: string | null) => {
    // JSON.stringify escapes quotes, backslashes, C0 controls and lone surrogates; the rest is revealed.
    const r = reveal(JSON.stringify(s));
    for (const p of r.pieces) {
      if (p.kind) out.pieces.push(p);
      else plain(p.text);
    }
    if (hasHidden(s)) out.hidden = true;
    if (r.spaces) out.spaces = true;
    if (path !== null && s.length > LONG_VALUE) {
      out.long.push({ path, length: s.length });
      out.pieces.push({ text: ` ⟨${s.length.toLocaleString('en-US')} characters⟩`, kind: 'long' });
    }
  };
  const nl = (depth: number) => (indent ? `\n${' '.repeat(indent * depth)}` : '');
  const child = (path: string, key: string | number) =>
    typeof key === 'number'
      ? `${path}[${key}]`
      : /^[A-Za-z_$][\w$]*$/.test(key)
        ? path
          ? `${path}.${key}`
          : key
        : `${path}[${JSON.stringify(key)}]`;
  const walk = (v: unknown, depth: number, path: string) => {
    if (typeof v === 'string') return string(v, path || '(value)');
    if (v === null || typeof v !== 'object') return plain(JSON.stringify(v) ?? 'null');
    if (Array.isArray(v)) {
      if (v.length === 0) return plain('[]');
      plain('[');
      v.forEach((x, i) => {
        plain(`${i > 0 ? ',' : ''}${nl(depth + 1)}`);
        walk(x === undefined || typeof x === 'function' ? null : x, depth + 1, child(path, i));
      });
      return plain(`${nl(depth)}]`);
    }
    const entries = Object.entries(v).filter(([, x]) => x !== undefined && typeof x !== 'function');
    if (entries.length === 0) return plain('{}');
    plain('{');
    entries.forEach(([k, x], i) => {
      plain(`${i > 0 ? ',' : ''}${nl(depth + 1)}`);
      string(k, null);
      plain(indent ? ': ' : ':');
      walk(x, depth + 1, child(path, k));
    });
    plain(`${nl(depth)}}`);
  };
  walk(value, 0, '');
  return out;
}

/** An API key's prefix as the service gives it (`svc_abcd1234...`), with one ellipsis. */
export const keyPrefixShown = (prefix: string): string => `${prefix.replace(/(?:\.{3}|…)+$/, '')}…`;
