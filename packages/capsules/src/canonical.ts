/**
 * RFC 8785 canonical JSON for plain JSON values (objects, arrays, strings, finite numbers,
 * booleans, null): members sorted by UTF-16 code units, strings and numbers as ECMAScript's
 * JSON.stringify writes them, which is what RFC 8785 prescribes. Anything else throws.
 */
export function canonicalJson(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('non-finite numbers have no JSON form');
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object': {
      if (value === null) return 'null';
      if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null)
        throw new TypeError('only plain objects have a JSON form');
      const obj = value as Record<string, unknown>;
      const members = Object.keys(obj)
        .filter((k) => obj[k] !== undefined)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`);
      return `{${members.join(',')}}`;
    }
    default:
      throw new TypeError(`${typeof value} has no JSON form`);
  }
}

const encoder = new TextEncoder();

/** `sha256:<hex>` of the UTF-8 bytes, through WebCrypto (any runtime). */
export async function sha256Tagged(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(text)));
  let hex = '';
  for (const b of digest) hex += b.toString(16).padStart(2, '0');
  return `sha256:${hex}`;
}

export function base64url(bytes: Uint8Array): string {
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Decodes base64url without padding; throws on anything else (a second spelling must not verify). */
export function fromBase64url(text: string): Uint8Array<ArrayBuffer> {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) throw new TypeError('not base64url');
  const bin = atob(text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4));
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  if (base64url(bytes) !== text) throw new TypeError('not canonical base64url');
  return bytes;
}
