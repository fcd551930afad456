/** SHA-256, hex and RFC 8785 canonical JSON over WebCrypto: the same in browsers, Deno, Bun and Node. */

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));
const TAGGED_HASH_RE = /^sha256:[0-9a-f]{64}$/;
const encoder = new TextEncoder();

/** `sha256:` followed by 64 zeros: the previous_receipt_hash of the first receipt of a chain. */
export const GENESIS_HASH = `sha256:${'0'.repeat(64)}`;

export const isTaggedHash = (s: unknown): s is string => typeof s === 'string' && TAGGED_HASH_RE.test(s);

export function toHex(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) out += HEX[b];
  return out;
}

export const tag = (digest: Uint8Array) => `sha256:${toHex(digest)}`;

export function untag(tagged: string): Uint8Array {
  if (!isTaggedHash(tagged)) throw new Error(`not a sha256:<64 hex> hash: ${JSON.stringify(tagged)}`);
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = Number.parseInt(tagged.slice(7 + 2 * i, 9 + 2 * i), 16);
  return out;
}

export async function sha256(data: Uint8Array | string): Promise<Uint8Array> {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  return new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
}

/**
 * RFC 8785 canonical JSON of parsed JSON data: object keys sorted by UTF-16 code units, strings and
 * numbers written as ECMAScript's JSON.stringify writes them (which is what RFC 8785 prescribes).
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value))
      throw new Error('cannot canonicalize a non-finite number');
    const out = JSON.stringify(value);
    if (out === undefined) throw new Error(`cannot canonicalize a ${typeof value}`);
    return out;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  const obj = value as Record<string, unknown>;
  const parts: string[] = [];
  for (const k of keys) if (obj[k] !== undefined) parts.push(`${JSON.stringify(k)}:${canonicalJson(obj[k])}`);
  return `{${parts.join(',')}}`;
}

/** sha256 of the canonical JSON, tagged. */
export async function hashJson(value: unknown): Promise<string> {
  return tag(await sha256(canonicalJson(value)));
}
