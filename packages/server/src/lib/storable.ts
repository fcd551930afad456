import { storable } from '@svc/policy-engine';

/**
 * Text a peer sent (a provider's payment reference, an upstream's message) in a form both stores hold
 * alike: U+0000 and lone surrogates are written as `\u0000`-style escapes, everything else is kept.
 * What was received is recorded rather than lost or refused after the peer acted on it.
 */
export function storableText(s: string): string {
  if (storable(s)) return s;
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const pair = c >= 0xd800 && c <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
    if (pair) {
      out += s[i]! + s[i + 1]!;
      i++;
    } else if (c === 0 || (c >= 0xd800 && c <= 0xdfff)) {
      out += `\\u${c.toString(16).padStart(4, '0')}`;
    } else {
      out += s[i];
    }
  }
  return out;
}
