import { hash, randomFillSync } from 'node:crypto';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ANY_CASE_UUID_RE = new RegExp(UUID_RE.source, 'i');

// Random bytes are drawn 4 KiB at a time: one system call per 256 ids instead of one per id.
const POOL = Buffer.alloc(4096);
let poolOffset = POOL.length;

function random16(): Buffer {
  if (poolOffset + 16 > POOL.length) {
    randomFillSync(POOL);
    poolOffset = 0;
  }
  const out = Buffer.from(POOL.subarray(poolOffset, poolOffset + 16));
  poolOffset += 16;
  return out;
}

let lastMs = 0;
let counter = 0;

/**
 * RFC 9562 UUID version 7: 48-bit Unix milliseconds, then randomness. Ids created within one
 * millisecond in this process stay ordered through a 12-bit counter in rand_a, so sorting by id
 * is sorting by creation.
 */
export function uuidv7(now: number = Date.now()): string {
  if (now > lastMs) {
    lastMs = now;
    counter = 0;
  } else {
    counter++;
    if (counter > 0xfff) {
      // Counter exhausted within one millisecond: borrow the next millisecond.
      lastMs++;
      counter = 0;
    }
  }
  return formatV7(random16(), lastMs, counter);
}

/**
 * Lays out a UUID version 7 over 16 bytes: `ms` in the first 48 bits, the version, `randA` (12 bits)
 * and the variant; the other bits of `b` stay as they are.
 */
function formatV7(b: Buffer, ms: number, randA: number): string {
  b[0] = Math.floor(ms / 2 ** 40) & 0xff;
  b[1] = Math.floor(ms / 2 ** 32) & 0xff;
  b[2] = (ms >>> 24) & 0xff;
  b[3] = (ms >>> 16) & 0xff;
  b[4] = (ms >>> 8) & 0xff;
  b[5] = ms & 0xff;
  b[6] = 0x70 | ((randA >>> 8) & 0x0f);
  b[7] = randA & 0xff;
  b[8] = 0x80 | (b[8]! & 0x3f);
  const h = b.toString('hex', 0, 16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * A UUID as the service writes ids: in lower case. Ids are stored and compared as text, so an id
 * written in upper case would name nothing; requests are refused (or, for X-Organization-Id,
 * lowered) rather than answered 404 for what exists.
 */
export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

/** A UUID in any case (RFC 9562 reads them case-insensitively). */
export function isUuidAnyCase(value: string): boolean {
  return ANY_CASE_UUID_RE.test(value);
}

/**
 * A UUID version 7 derived, not drawn: the Unix milliseconds `ms`, `index` (0-4095) in rand_a and,
 * in rand_b, 62 bits of SHA-256 over `seed` and `index`. The same three arguments always give the
 * same id, so a request sent again can find what its first attempt recorded; ids of one seed sort
 * by index. `seed` must be unique to what the ids name (an organization's Idempotency-Key claim).
 */
export function derivedUuidv7(ms: number, seed: string, index: number): string {
  return formatV7(hash('sha256', `${seed}\n${index}`, 'buffer'), ms, index);
}
