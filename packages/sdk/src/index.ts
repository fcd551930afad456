export { createClient } from './client.js';
export {
  ApiError,
  ApprovalDeniedError,
  ApprovalTimeoutError,
  DeniedError,
  FlushError,
  LogFullError,
  LogRejectedError,
  ServiceUnavailableError,
  SvcError,
} from './errors.js';
export type {
  Approval,
  ApprovalWaitOptions,
  CallContext,
  Client,
  ClientOptions,
  DecisionValue,
  FailedConstraint,
  ToolArgs,
  UnavailableBehaviour,
  ValidationResult,
  WrapOptions,
} from './model.js';
