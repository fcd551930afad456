import type { FailedConstraint } from './model.js';

/** Base of every error the SDK throws. */
export class SvcError extends Error {
  override name = 'SvcError';
}

/** The policy denied the call (or the service could not be reached and the client fails closed). */
export class DeniedError extends SvcError {
  override name = 'DeniedError';
  constructor(
    readonly toolName: string,
    readonly reason: string,
    readonly failedConstraints: readonly FailedConstraint[],
    readonly decisionId?: string,
  ) {
    super(`Tool call "${toolName}" denied: ${reason}`);
  }
}

/** No answer from a person within the wait, or the approval expired on the server (`expired`). */
export class ApprovalTimeoutError extends SvcError {
  override name = 'ApprovalTimeoutError';
  constructor(
    readonly approvalId: string,
    readonly expired: boolean,
  ) {
    super(
      expired
        ? `Approval ${approvalId} expired before anyone resolved it`
        : `Approval ${approvalId} was not resolved in time`,
    );
  }
}

export class ApprovalDeniedError extends SvcError {
  override name = 'ApprovalDeniedError';
  constructor(
    readonly approvalId: string,
    readonly resolvedBy: string | null,
  ) {
    super(`Approval ${approvalId} was denied${resolvedBy ? ` by ${resolvedBy}` : ''}`);
  }
}

/** The service answered with an error envelope that retrying will not fix (400, 401, 403, 404...). */
export class ApiError extends SvcError {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
  }
}

/** The service could not be reached (or kept answering 429/503) and `onUnavailable` is `throw`. */
export class ServiceUnavailableError extends SvcError {
  override name = 'ServiceUnavailableError';
}

/**
 * `log.whenFull: 'throw'`: a local decision could not be answered because `log.maxBuffered`
 * decisions already wait to be recorded. The call was not decided (nothing was recorded); the
 * adapters and `enforce` let it propagate, so the tool does not run.
 */
export class LogFullError extends SvcError {
  override name = 'LogFullError';
}

/**
 * Local decisions could not be handed to the server in time, or the service refuses them all (a key
 * without a project: 400 `missing_project`; a 404: POST /v1/decisions is not at the client's
 * baseUrl); `pending` holds them. From close() (`kept: false`) the
 * client has given them up: they are yours to keep or send. From the flush when the process is
 * about to exit (`kept: true`, reported to onError) the log still holds them and sends them should
 * the process go on: sending them yourself as well could record them twice; decisions the service
 * refuses are given up there too (`kept: false`).
 */
export class FlushError extends SvcError {
  override name = 'FlushError';
  constructor(
    message: string,
    /** The decisions not yet recorded, as POST /v1/decisions bodies (JSON strings). */
    readonly pending: string[],
    /** Whether the log still holds them (and sends them while the process goes on). */
    readonly kept = false,
  ) {
    super(message);
  }
}

/** The server refused a logged decision as invalid (it can never be recorded); reported, then dropped. */
export class LogRejectedError extends SvcError {
  override name = 'LogRejectedError';
  constructor(
    readonly body: string,
    override readonly cause: ApiError,
  ) {
    super(`A local decision was refused by the server: ${cause.message}`);
  }
}
