/** Query parameters that carry credentials (SSE `apiKey`, WebSocket `token`): never written to logs. */
const CREDENTIAL_PARAMS = /([?&](?:apiKey|token)=)[^&#]*/gi;

export function redactCredentials(url: string): string {
  return url.replace(CREDENTIAL_PARAMS, '$1[redacted]');
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
