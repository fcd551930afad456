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
