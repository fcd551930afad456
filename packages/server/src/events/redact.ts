/**
 * Query parameters that carry credentials (SSE `apiKey`, WebSocket and login-link `token`, the
 * OpenID Connect callback's authorization `code` and `state`): never written to logs.
 */
const CREDENTIAL_PARAMS = new Set(['apikey', 'token', 'code', 'state']);

/** The decoded name of one `name=value` query segment, as the query parser sees it. */
function paramName(segment: string): string {
  const eq = segment.indexOf('=');
  const raw = eq < 0 ? segment : segment.slice(0, eq);
  // URLSearchParams decodes percent escapes and `+` like the query parser does, and never throws.
  return [...new URLSearchParams(`${raw}=`).keys()][0] ?? '';
}

/**
 * The URL with the values of credential parameters replaced by `[redacted]`, however their names are
 * spelled (`apiKey`, `APIKEY`, `api%4Bey`…); everything else is left exactly as received.
 */
export function redactCredentials(url: string): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const hash = url.indexOf('#', q);
  const query = url.slice(q + 1, hash < 0 ? undefined : hash);
  const redacted = query
    .split('&')
    .map((segment) => {
      const eq = segment.indexOf('=');
      if (eq < 0 || !CREDENTIAL_PARAMS.has(paramName(segment).toLowerCase())) return segment;
      return `${segment.slice(0, eq)}=[redacted]`;
    })
    .join('&');
  return `${url.slice(0, q + 1)}${redacted}${hash < 0 ? '' : url.slice(hash)}`;
}

interface LoggedRequest {
  method: string;
  url: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/** Fastify's default request log fields, with credentials in the query string redacted. */
export function requestLogFields(req: LoggedRequest) {
  return {
    method: req.method,
    url: redactCredentials(req.url),
    host: req.host,
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}
