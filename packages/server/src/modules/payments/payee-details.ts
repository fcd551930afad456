import {
  type BeneficiaryDetails,
  BeneficiaryError,
  beneficiaryHash,
  normalizeBeneficiary,
} from '@svc/capsules';
import { gatewayError } from './model.js';
import type { Invalid } from './money.js';

/**
 * Normalizes and hashes a payee's details with @svc/capsules; bad details are the caller's, answered
 * with `invalid`: `param.name` when the package refuses the name, else `param` (no account_number
 * or wallet_address, or another member that is no string).
 */
export async function hashDetails(
  details: BeneficiaryDetails,
  param: string,
  invalid: Invalid = gatewayError.invalidRequest,
): Promise<{ normalized: Record<string, string>; hash: string }> {
  try {
    return { normalized: normalizeBeneficiary(details), hash: await beneficiaryHash(details) };
  } catch (err) {
    const member = err instanceof BeneficiaryError && err.member === 'name' ? `${param}.name` : param;
    throw invalid(`${member}: ${(err as Error).message}`, member);
  }
}
