/**
 * The one error type of the API. Every non-2xx answer is `{error: {code, message}}` with the status
 * taken from STATUS_BY_CODE, so a code can never be sent with two different statuses.
 */
export const STATUS_BY_CODE = {
  invalid_json: 400,
  missing_organization: 400,
  missing_project: 400,
  invalid_status: 400,
  validation_failed: 400,
  idempotency_key_reused_with_different_payload: 400,
  unauthorized: 401,
  invalid_api_key: 401,
  authorization_error: 403,
  csrf_failed: 403,
  not_found: 404,
  method_not_allowed: 405,
  slug_taken: 409,
  policy_exists: 409,
  conflict: 409,
  action_conflict: 409,
  action_not_authorized: 409,
  reservation_expired: 409,
  approval_already_resolved: 409,
  idempotency_request_in_progress: 409,
  expired: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  request_timeout: 408,
  headers_too_large: 431,
  rate_limit_exceeded: 429,
  plan_limit_exceeded: 429,
  internal_error: 500,
  service_unavailable: 503,
  signing_key_missing: 503,
} as const;

export type ErrorCode = keyof typeof STATUS_BY_CODE;

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message: string, headers?: Record<string, string>) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.status = STATUS_BY_CODE[code];
    this.headers = headers;
  }
}

export const notFound = (what: string) => new AppError('not_found', `${what} not found`);
export const forbidden = (message: string) => new AppError('authorization_error', message);
export const invalid = (message: string) => new AppError('validation_failed', message);
