import { precisionProblem } from '@svc/capsules';
import { type GatewayError, gatewayError } from './model.js';

/** The error a malformed member answers: invalid_request, or capsule_payload_invalid on consume. */
export type Invalid = (message: string, param: string) => GatewayError;

/** Currencies the gateway accepts; both count 1:1 in USD on the spend ledger (USDC is a USD stablecoin). */
export const GATEWAY_CURRENCIES = ['USD', 'USDC'] as const;

/** Whether the gateway pays in this currency: only such an amount can ever be bound to a capsule. */
export const gatewayPays = (currency: string): boolean =>
  (GATEWAY_CURRENCIES as readonly string[]).includes(currency);

const DECIMAL = /^(0|[1-9]\d{0,14})(\.\d{1,6})?$/;
/** Largest amount accepted, as the economic API does (1,000,000,000 USD). */
const MAX_MICROS = 1_000_000_000_000_000n;

/** Exact micro-units of a decimal string (never through a binary float). */
export function toMicros(
  amount: string,
  param: string,
  invalid: Invalid = gatewayError.invalidRequest,
): number {
  if (!DECIMAL.test(amount)) {
    throw invalid(`${param} must be a decimal string such as "12.50"`, param);
  }
  const [whole, frac = ''] = amount.split('.');
  const micros = BigInt(whole!) * 1_000_000n + BigInt(frac.padEnd(6, '0'));
  if (micros > MAX_MICROS) throw invalid(`${param} is above 1000000000`, param);
  return Number(micros);
}

/**
 * Checks currency and precision of a money value; answers its micro-units. `param` is the member
 * holding it (`amount_ceiling`), or '' when currency and amount are members of the body itself.
 */
export function moneyMicros(
  money: { currency: string; amount: string },
  param: string,
  invalid: Invalid = gatewayError.invalidRequest,
): number {
  const at = (member: string) => (param ? `${param}.${member}` : member);
  if (!gatewayPays(money.currency)) {
    throw invalid(`${at('currency')} must be one of ${GATEWAY_CURRENCIES.join(', ')}`, at('currency'));
  }
  // Too many decimals is its own catalog code, checked before the general form.
  const problem = /^\d+(\.\d+)?$/.test(money.amount) ? precisionProblem(money) : null;
  if (problem) throw gatewayError.precision(problem, at('amount'));
  return toMicros(money.amount, at('amount'), invalid);
}

/**
 * The amount of a payment (a capsule's ceiling, a consume's amount): a money value as moneyMicros
 * checks it, and more than zero. A payment of nothing authorizes nothing, yet consuming it would use
 * the capsule up and move what it binds (invoice, workflow) on a $0 ledger entry: refused.
 */
export function paymentMicros(
  money: { currency: string; amount: string },
  param: string,
  invalid: Invalid = gatewayError.invalidRequest,
): number {
  const micros = moneyMicros(money, param, invalid);
  const at = param ? `${param}.amount` : 'amount';
  if (micros === 0) throw invalid(`${at} must be greater than 0`, at);
  return micros;
}

/** Decimal string of micro-units, without trailing zeros ("12.5", "3"). */
export function fromMicros(micros: number): string {
  const whole = Math.floor(micros / 1_000_000);
  const frac = String(micros % 1_000_000)
    .padStart(6, '0')
    .replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : String(whole);
}
