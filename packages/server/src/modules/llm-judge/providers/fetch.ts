import { boundedFetch } from '../../../lib/bounded-fetch.js';

/**
 * The largest answer read from a model provider. A verdict or a Charter proposal is a few KiB of
 * JSON; a provider (or whatever answers at its address) sending more is refused before it costs memory.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * The fetch every provider adapter uses: only the configured address is asked (a redirect, which
 * would carry the API key and the call's arguments to another host, is refused, not followed) and
 * an answer is read up to MAX_ANSWER_BYTES.
 */
export const providerFetch: typeof fetch = (input, init) =>
  boundedFetch(input, init, { maxBytes: MAX_ANSWER_BYTES });

/** One provider call as it went over the wire: the request body sent and the answer body received, as text. */
export interface Exchange {
  request: string | null;
  response: string | null;
}

/**
 * `providerFetch` that also keeps, in `exchange`, the request body and the answer body exactly as
 * received (decoded as UTF-8, as the SDK decodes it). The SDK parses the answer with JSON.parse, which
 * keeps the last of duplicate members and so hides them; the judge reads the raw body instead.
 */
export function recordingFetch(exchange: Exchange): typeof fetch {
  return async (input, init) => {
    exchange.request = typeof init?.body === 'string' ? init.body : null;
    exchange.response = null;
    const res = await providerFetch(input, init);
    // The body is in memory (boundedFetch read it whole): cloning it costs no network read.
    exchange.response = await res.clone().text();
    return res;
  };
}
