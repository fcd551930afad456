/** SPEC section 8: regex constraints are at most 256 characters (code points, see codePointLength). */
export const MAX_REGEX_LENGTH = 256;

/**
 * A string's length in characters (Unicode code points), as every length limit counts it: UTF-16
 * code units would count an astral character such as an emoji twice. A lone surrogate counts one.
 */
export function codePointLength(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}
