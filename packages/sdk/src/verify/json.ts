const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/**
 * The first member name that one object of `text` holds twice, at any depth, or null. JSON.parse
 * keeps the last of two, so such a line can show one value and verify with another (I-JSON,
 * RFC 7493, forbids them). Names are compared as JSON.parse reads them (`"a"` and `"\u0061"` are one
 * name). `text` must already parse as JSON: this only walks its structure, in one pass, skipping
 * string contents with indexOf.
 */
export function duplicateMember(text: string): string | null {
  // One entry per open container: the names seen so far for an object, null for an array.
  const open: (Set<string> | null)[] = [];
  let expectName = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = text.indexOf('"', i + 1);
      while (end !== -1 && escaped(text, end)) end = text.indexOf('"', end + 1);
      if (end === -1) return null; // not JSON: JSON.parse says so
      if (expectName) {
        const raw = text.slice(i + 1, end);
        const name: string = raw.includes('\\') ? JSON.parse(text.slice(i, end + 1)) : raw;
        const names = open[open.length - 1]!;
        if (names.has(name)) return name;
        names.add(name);
        expectName = false;
      }
      i = end;
    } else if (c === OPEN_OBJECT) {
      open.push(new Set());
      expectName = true;
    } else if (c === OPEN_ARRAY) {
      open.push(null);
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      open.pop();
      expectName = false;
    } else if (c === COMMA) {
      expectName = open[open.length - 1] != null;
    }
  }
  return null;
}

/** Whether the quote at `at` is escaped: an odd number of backslashes before it. */
function escaped(text: string, at: number): boolean {
  let n = 0;
  for (let k = at - 1; text.charCodeAt(k) === BACKSLASH; k--) n++;
  return n % 2 === 1;
}
