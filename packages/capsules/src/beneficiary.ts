import { canonicalJson, sha256Tagged } from './canonical.js';

/** A payee as the paying side knows it. Only `name` and one account identifier are required. */
export interface BeneficiaryDetails {
  name: string;
  /** Bank account number or IBAN. */
  account_number?: string;
  /** Routing number, sort code or BIC. */
  routing_number?: string;
  /** On-chain address, for rails such as usdc. */
  wallet_address?: string;
  /** ISO 3166-1 alpha-2. */
  country?: string;
}

const MEMBERS = ['name', 'account_number', 'routing_number', 'wallet_address', 'country'] as const;

/**
 * Details that cannot name a payee. `member` is the one at fault, or null when neither
 * `account_number` nor `wallet_address` is given.
 */
export class BeneficiaryError extends TypeError {
  constructor(
    message: string,
    readonly member: (typeof MEMBERS)[number] | null,
  ) {
    super(message);
    this.name = 'BeneficiaryError';
  }
}

/** A payee's name as it is hashed: NFC, trimmed, lower case, each run of white space one space. */
export function normalizedName(name: string): string {
  return name.normalize('NFC').trim().toLowerCase().replace(/\s+/g, ' ');
}

/**
 * The normalized form that is hashed, so that the same payee written twice gives one hash: every
 * string NFC-normalized and trimmed; the name lower-cased with runs of white space made one space;
 * identifiers upper-cased with spaces and hyphens removed; wallet addresses lower-cased (hex
 * addresses are case-insensitive); absent or empty members left out.
 */
export function normalizeBeneficiary(details: BeneficiaryDetails): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of MEMBERS) {
    const raw = details[key];
    if (raw === undefined || raw === null) continue;
    if (typeof raw !== 'string') throw new BeneficiaryError(`beneficiary ${key} must be a string`, key);
    let v = raw.normalize('NFC').trim();
    if (key === 'name') v = normalizedName(v);
    else if (key === 'wallet_address') v = v.toLowerCase();
    else v = v.toUpperCase().replace(/[\s-]+/g, '');
    if (v !== '') out[key] = v;
  }
  if (!out['name']) throw new BeneficiaryError('beneficiary name is required', 'name');
  if (!out['account_number'] && !out['wallet_address']) {
    throw new BeneficiaryError('beneficiary needs an account_number or a wallet_address', null);
  }
  return out;
}

/** `sha256:<hex>` of the RFC 8785 canonical JSON of the normalized details: the capsule's `beneficiary`. */
export async function beneficiaryHash(details: BeneficiaryDetails): Promise<string> {
  return sha256Tagged(canonicalJson(normalizeBeneficiary(details)));
}
