import { ApiError, ServiceUnavailableError, SvcError } from './errors.js';

export interface HttpOptions {
  baseUrl: string;
  apiKey: string;
  fetch: typeof fetch;
  timeoutMs: number;
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  body: unknown;
}

/** Statuses worth retrying: the server asked to slow down, or could not answer now. */
export const isRetryable = (status: number) =>
  status === 429 || status === 502 || status === 503 || status === 504;

/**
 * Milliseconds to wait before attempt `attempt + 1`: the server's Retry-After (seconds or an HTTP
 * date) when it sent one, else exponential backoff from 250 ms with jitter, capped at `cap`.
 */
export function retryDelay(attempt: number, headers: Headers | null, cap: number, now = Date.now()): number {
  const after = retryAfter(headers, now);
  if (after !== null) return after;
  const base = Math.min(cap, 250 * 2 ** attempt);
  return base / 2 + Math.random() * (base / 2);
}

/** The wait in milliseconds a Retry-After header asks for (seconds or an HTTP date), or null without one. */
export function retryAfter(headers: Headers | null, now = Date.now()): number | null {
  const after = headers?.get('retry-after');
  if (!after) return null;
  const seconds = Number(after);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(after);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/**
 * The longest delay a timer takes (2^31 - 1 ms, about 24.8 days). Node fires a timer set longer, or
 * to Infinity, after 1 ms (with a TimeoutOverflowWarning), and AbortSignal.timeout refuses a delay that
 * is not an integer of at most 2^32 - 1: every delay goes through timerMs.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;
export const timerMs = (ms: number): number => Math.min(Math.max(0, Math.ceil(ms)), MAX_TIMER_MS);

/**
 * Resolves after `ms`, or at once when `signal` aborts. A `background` wait (retries nobody awaits,
 * reconnects) does not keep a Node process alive by itself.
 */
export const sleep = (ms: number, signal?: AbortSignal, background = false) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, timerMs(ms));
    if (background) unref(timer);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** Node: a timer that does not keep the process alive by itself (elsewhere timers have no such notion). */
export function unref(timer: ReturnType<typeof setTimeout>): void {
  (timer as { unref?: () => void }).unref?.();
}

/**
 * `baseUrl` in its normal form (the URL as parsed, without trailing slashes), to which each route's
 * path is appended. Anything else than an absolute http: or https: URL that a path can follow (no
 * credentials, which fetch refuses, no query or fragment) throws SvcError: every request to it would
 * fail inside fetch, where a failure reads as the service being unreachable (and `onUnavailable:
 * 'allow'` would allow every call unchecked), or reach something else than the service's routes.
 */
export function serviceBase(baseUrl: unknown): string {
  let url: URL | null = null;
  try {
    url = typeof baseUrl === 'string' ? new URL(baseUrl) : null;
  } catch {
    // not a URL: refused below
  }
  const problem =
    typeof baseUrl !== 'string'
      ? 'a string'
      : url === null
        ? 'an absolute URL'
        : url.protocol !== 'http:' && url.protocol !== 'https:'
          ? 'an http: or https: URL'
          : url.username !== '' || url.password !== ''
            ? 'a URL without credentials'
            : /[?#]/.test(url.href) // an empty one too ("https://host/?")
              ? 'a URL without a query or fragment'
              : null;
  if (problem !== null) {
    const given = typeof baseUrl === 'string' ? JSON.stringify(baseUrl) : `a value of type ${typeof baseUrl}`;
    throw new SvcError(
      `baseUrl must be ${problem}, the service's root such as https://svc.example.com, not ${given}`,
    );
  }
  return `${url!.origin}${url!.pathname}`.replace(/\/+$/, '');
}

/**
 * An HTTP header value as fetch takes it: line breaks and spaces around it are dropped, and it may
 * hold no U+0000, CR or LF, nor any character above U+00FF.
 */
const HEADER_VALUE = /^[\t\n\r ]*[^\0\r\n\u0100-\uffff]*[\t\n\r ]*$/;

/**
 * `apiKey`, checked: anything else than a string that a header can carry throws SvcError. fetch
 * would refuse it in every request, where the failure reads as the service being unreachable (and
 * `onUnavailable: 'allow'` would allow every call unchecked). The message does not show the key.
 */
export function serviceKey(apiKey: unknown): string {
  if (typeof apiKey === 'string' && HEADER_VALUE.test(apiKey)) return apiKey;
  throw new SvcError(
    typeof apiKey === 'string'
      ? 'apiKey must be a value an HTTP header can carry: no line break or U+0000 inside it, no character above U+00FF'
      : `apiKey must be a string, not a value of type ${typeof apiKey}`,
  );
}

/**
 * One JSON request to the service; network failures and timeouts reject, HTTP errors do not. An
 * unusable `baseUrl` or `apiKey` throws SvcError (serviceBase, serviceKey).
 */
export function createHttp(opts: HttpOptions) {
  const base = serviceBase(opts.baseUrl);
  const apiKey = serviceKey(opts.apiKey);
  // Called as a plain function, never as a method of an object of ours: a browser's `window.fetch`
  // throws "Illegal invocation" when `this` is anything but the window (or undefined).
  const f = opts.fetch;
  const fetchFn: typeof fetch = (input, init) => f(input, init);
  return {
    async request(
      method: string,
      path: string,
      body?: string,
      signal?: AbortSignal,
      /** Sent besides the standard ones (the decision log's Idempotency-Key). */
      extraHeaders?: Record<string, string>,
    ): Promise<HttpResponse> {
      const timeout = AbortSignal.timeout(timerMs(opts.timeoutMs));
      const url = `${base}${path}`;
      const res = await fetchFn(url, {
        method,
        headers: {
          ...extraHeaders,
          'x-service-api-key': apiKey,
          accept: 'application/json',
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(body !== undefined ? { body } : {}),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        // Followed, a redirect would take the API key to wherever it points.
        redirect: 'manual',
      });
      if (res.type === 'opaqueredirect' || (res.status >= 300 && res.status < 400)) {
        await res.body?.cancel();
        return { status: res.status, headers: res.headers, body: redirected(method, url, res) };
      }
      const text = await res.text();
      let parsed: unknown = null;
      if (text !== '') {
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = text;
        }
      }
      return { status: res.status, headers: res.headers, body: parsed };
    },

    /** `baseUrl` + path, for the event stream. */
    url: (path: string) => `${base}${path}`,
    apiKey,
    fetch: fetchFn,
  };
}

export type Http = ReturnType<typeof createHttp>;

/**
 * The error envelope standing for a redirect, which is never followed: code `redirected`, and a
 * message naming where it pointed (a browser's fetch hides that, and answers status 0).
 */
function redirected(method: string, url: string, res: Response) {
  const to = res.headers.get('location');
  return {
    error: {
      code: 'redirected',
      message:
        `${method} ${url} answered a redirect${to ? ` to ${to}` : ''}, which is not followed (the API key ` +
        'would be sent there too): set baseUrl to the address the service answers at',
    },
  };
}

/**
 * True when a non-2xx answer carries the service's error envelope (`{"error": {"code", "message"}}`,
 * both strings): the API's own refusal. A proxy's or load balancer's page (HTML, or JSON of another
 * shape) has none: it is no verdict of the service on the decisions; apiError names it `http_<status>`.
 */
export function fromService(res: HttpResponse): boolean {
  const err = envelopeOf(res);
  return typeof err?.code === 'string' && typeof err.message === 'string';
}

/** The `error` member of an answer's JSON body, as it is (any type), if any. */
function envelopeOf(res: HttpResponse): { code?: unknown; message?: unknown } | undefined {
  return (res.body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
}

/** The error envelope of a non-2xx answer as an ApiError. */
export function apiError(res: HttpResponse): ApiError {
  const err = envelopeOf(res);
  return new ApiError(
    res.status,
    typeof err?.code === 'string' ? err.code : `http_${res.status}`,
    typeof err?.message === 'string' ? err.message : String(res.body ?? ''),
  );
}

/** What an error answer said (its envelope's message, or its body), cut to 200 characters. */
function answerOf(err: ApiError): string {
  const said = err.message.slice(`${err.status} ${err.code}: `.length);
  return said.length > 200 ? `${said.slice(0, 200)}…` : said;
}

/**
 * A 404 that no route of the service would answer (POST /v1/tools/validate, POST /v1/decisions,
 * a policy read without the "no policy" marker): the request reached something else than the
 * service's API. The error names the URL called.
 */
export function notTheService(method: string, url: string, res: HttpResponse): ApiError {
  const err = apiError(res);
  const answer = answerOf(err);
  return new ApiError(
    res.status,
    err.code,
    `${method} ${url} is not a route of the service${answer ? ` (the answer: ${answer})` : ''}: baseUrl must be the service's root URL (such as https://svc.example.com, without /v1), reached without a proxy that changes paths`,
  );
}

/**
 * A 5xx answer without the service's envelope (see fromService): a proxy's or load balancer's own
 * error page. The service did not answer: ServiceUnavailableError, naming the URL and what was
 * answered, with the answer as an ApiError (code `http_<status>`) for cause. (A proxy's 4xx page may
 * depend on what the request holds, so validate throws it as the ApiError instead.)
 */
export function notFromService(method: string, url: string, res: HttpResponse): ServiceUnavailableError {
  const err = apiError(res);
  const answer = answerOf(err);
  return new ServiceUnavailableError(
    `${method} ${url} answered ${res.status} without the service's error envelope (a proxy's or load balancer's page${answer ? `: ${answer}` : ''}), so the service did not decide`,
    { cause: err },
  );
}
