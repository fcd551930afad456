/** Why `boundedFetch` refused an answer. */
export type RefusalReason = 'redirect' | 'too_large';

/**
 * An answer `boundedFetch` would not pass on: a redirect (never followed), or a body over the limit.
 * Network failures, timeouts and a body cut short are not refusals: they reject as `fetch` does.
 */
export class ResponseRefused extends Error {
  override readonly name = 'ResponseRefused';
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
  }
}

export interface BoundedFetchOptions {
  /** The largest body accepted, in bytes as received after content decoding (gzip, br). */
  maxBytes: number;
}

/** The statuses `fetch` would follow (Fetch standard, "redirect status"). */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Statuses whose Response may not have a body. */
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/**
 * `fetch` for answers from a server the service does not control (identity providers, key sets, model
 * providers): what one answer can cost is bounded, and it cannot send the request on elsewhere.
 *
 * - Redirects are never followed, whatever `init.redirect` says: a redirect status rejects with
 *   `ResponseRefused('redirect')`, so a request is only ever sent to the URL given.
 * - The body is read in full before the promise resolves, at most `maxBytes` of it: a larger one
 *   (announced by `Content-Length`, or counted while reading, decoded) rejects with
 *   `ResponseRefused('too_large')` and the rest is not read.
 * - It resolves to a standard Response whose body is in memory (`json()`, `text()` cannot fail on the
 *   network any more). `Content-Length` and `Content-Encoding` are dropped: the body is decoded.
 * - `init.signal` bounds the whole exchange, body included; without one a silent server is waited for.
 *   Connection failures, a body cut short and the signal's abort reject as `fetch` does (a TypeError,
 *   or the signal's reason, e.g. a `TimeoutError` DOMException).
 */
export async function boundedFetch(
  input: string | URL | Request,
  init: RequestInit | undefined,
  { maxBytes }: BoundedFetchOptions,
): Promise<Response> {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) {
    throw new TypeError(`maxBytes must be a non-negative integer, not ${maxBytes}`);
  }
  const res = await fetch(input, { ...init, redirect: 'manual' });
  const where = new URL(res.url || (input instanceof Request ? input.url : String(input))).origin;
  if (res.type === 'opaqueredirect' || REDIRECT_STATUSES.has(res.status)) {
    await res.body?.cancel().catch(() => {});
    const to = res.headers.get('location');
    throw new ResponseRefused(
      'redirect',
      `${where} answered ${res.status} redirecting ${to ? `to ${to.slice(0, 200)}` : 'elsewhere'}: redirects are not followed`,
    );
  }
  const tooLarge = () =>
    new ResponseRefused('too_large', `the answer from ${where} is larger than ${maxBytes} bytes`);
  const declared = Number(res.headers.get('content-length') ?? Number.NaN);
  // A compressed body's length says nothing of its decoded size: only an uncompressed one is trusted.
  if (!res.headers.has('content-encoding') && declared > maxBytes) {
    await res.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (res.body) {
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => {});
        throw tooLarge();
      }
      chunks.push(value);
    }
  }
  const headers = new Headers(res.headers);
  headers.delete('content-length');
  headers.delete('content-encoding');
  const body = NULL_BODY_STATUSES.has(res.status) ? null : Buffer.concat(chunks, total);
  const out = new Response(body, { status: res.status, statusText: res.statusText, headers });
  // Where the answer came from, as fetch's own Response says (a constructed one has an empty url).
  Object.defineProperty(out, 'url', { value: res.url });
  return out;
}
