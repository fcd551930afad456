import { CanonicalJsonError } from '../ledger/canonical.js';
import { AppError, invalid } from './errors.js';

// The limits of request JSON are shared with the SDK, which must not decide locally a call whose
// decision this server would refuse to record: one implementation, in the policy engine.
export { bodyJsonProblem, MAX_BODY_DEPTH, MAX_JSON_DEPTH, nestedDeeperThan } from '@svc/policy-engine';

/**
 * The error to answer when a decision could not be recorded: the client's data that cannot be
 * canonicalized is its mistake (400, do not retry); anything else is ours (503, retry).
 */
export function recordError(err: unknown, retryMessage: string): AppError {
  if (err instanceof CanonicalJsonError) return invalid(`The call cannot be recorded: ${err.message}`);
  return new AppError('service_unavailable', retryMessage);
}
