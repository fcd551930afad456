import { CAPSULE_VERSION, type CapsulePayload, CURRENCY_DECIMALS } from './model.js';

const HASH = '^sha256:[0-9a-f]{64}$';
const ISO = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?Z$';
const AMOUNT = '^(0|[1-9]\\d{0,14})(\\.\\d{1,6})?$';
const ID = { type: 'string', minLength: 1, maxLength: 200 } as const;

/** JSON Schema (2020-12) of the capsule payload; shipped as schema/capsule-payload.schema.json. */
export const CAPSULE_PAYLOAD_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'urn:svc:schema:capsule-payload:1',
  title: 'Spend capsule payload (svc.capsule/1)',
  type: 'object',
  additionalProperties: false,
  required: [
    'version',
    'capsule_id',
    'issuer',
    'organization_id',
    'entity_id',
    'agent_id',
    'rail_allowlist',
    'beneficiary',
    'amount_ceiling',
    'pack_id',
    'pack_version',
    'policy_sha256',
    'issued_at',
    'expires_at',
    'nonce',
  ],
  properties: {
    version: { const: CAPSULE_VERSION },
    capsule_id: ID,
    issuer: { type: 'string', minLength: 1, maxLength: 2048 },
    organization_id: ID,
    entity_id: ID,
    agent_id: ID,
    rail_allowlist: {
      type: 'array',
      minItems: 1,
      maxItems: 16,
      uniqueItems: true,
      items: { type: 'string', pattern: '^[a-z0-9_-]{1,32}$' },
    },
    beneficiary: { type: 'string', pattern: HASH },
    amount_ceiling: {
      type: 'object',
      additionalProperties: false,
      required: ['currency', 'amount'],
      properties: {
        currency: { type: 'string', pattern: '^[A-Z]{3,5}$' },
        amount: { type: 'string', pattern: AMOUNT },
      },
    },
    pack_id: ID,
    pack_version: { type: 'integer', minimum: 1 },
    policy_sha256: { type: 'string', pattern: HASH },
    issued_at: { type: 'string', pattern: ISO },
    expires_at: { type: 'string', pattern: ISO },
    nonce: { type: 'string', pattern: '^[A-Za-z0-9_-]{22,64}$' },
    invoice_hash: { type: 'string', pattern: HASH },
    workflow_id: ID,
    approval_ref: ID,
  },
} as const;

export interface PayloadProblem {
  /** JSON-pointer-like name of the offending member, e.g. `amount_ceiling.amount`. */
  param: string;
  message: string;
}

const str = (v: unknown): v is string => typeof v === 'string';

/**
 * Length as JSON Schema counts it (and the mint's validator): in code points, a surrogate pair being
 * one, a lone surrogate one too. `String.length` counts UTF-16 units: 150 emoji would be 300.
 */
function codePoints(v: string): number {
  let n = 0;
  for (const _ of v) n++;
  return n;
}

/**
 * The schema's checks, written out so the package needs no validator at run time (the test suite
 * checks both agree), plus what a schema cannot say: expires_at after issued_at, and the amount's
 * precision for its currency.
 */
export function payloadProblems(value: unknown): PayloadProblem[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return [{ param: 'payload', message: 'the payload must be a JSON object' }];
  }
  const p = value as Record<string, unknown>;
  const problems: PayloadProblem[] = [];
  const props = CAPSULE_PAYLOAD_SCHEMA.properties as Record<string, Record<string, unknown>>;
  for (const key of Object.keys(p)) {
    // Own members only: `in` would take `constructor`, `toString` or `__proto__` for schema members.
    if (!Object.hasOwn(props, key)) problems.push({ param: key, message: `unknown member ${key}` });
  }
  for (const key of CAPSULE_PAYLOAD_SCHEMA.required) {
    if (p[key] === undefined) problems.push({ param: key, message: `${key} is required` });
  }
  for (const [key, rule] of Object.entries(props)) {
    const v = p[key];
    if (v === undefined || key === 'rail_allowlist' || key === 'amount_ceiling') continue;
    if ('const' in rule && v !== rule.const)
      problems.push({ param: key, message: `${key} must be ${String(rule.const)}` });
    if (rule.type === 'integer' && !(Number.isSafeInteger(v) && (v as number) >= (rule.minimum as number))) {
      problems.push({ param: key, message: `${key} must be an integer >= ${rule.minimum}` });
    }
    if (rule.type === 'string') {
      if (!str(v)) problems.push({ param: key, message: `${key} must be a string` });
      else if ('pattern' in rule && !new RegExp(rule.pattern as string).test(v))
        problems.push({ param: key, message: `${key} is not well formed` });
      else if (
        (rule.minLength !== undefined && codePoints(v) < (rule.minLength as number)) ||
        (rule.maxLength !== undefined && codePoints(v) > (rule.maxLength as number))
      )
        problems.push({
          param: key,
          message: `${key} must be ${rule.minLength}-${rule.maxLength} characters`,
        });
    }
  }
  const rails = p['rail_allowlist'];
  const railRule = CAPSULE_PAYLOAD_SCHEMA.properties.rail_allowlist;
  if (rails !== undefined) {
    if (
      !Array.isArray(rails) ||
      rails.length < railRule.minItems ||
      rails.length > railRule.maxItems ||
      new Set(rails).size !== rails.length ||
      !rails.every((r) => str(r) && new RegExp(railRule.items.pattern).test(r))
    ) {
      problems.push({
        param: 'rail_allowlist',
        message: 'rail_allowlist must be 1-16 distinct rail names ([a-z0-9_-])',
      });
    }
  }
  const money = p['amount_ceiling'];
  if (money !== undefined) {
    const found = moneyProblems(money, 'amount_ceiling');
    const precision =
      found.length === 0 ? precisionProblem(money as { currency: string; amount: string }) : null;
    problems.push(...found, ...(precision ? [{ param: 'amount_ceiling.amount', message: precision }] : []));
  }
  if (
    str(p['issued_at']) &&
    str(p['expires_at']) &&
    !(Date.parse(p['expires_at']) > Date.parse(p['issued_at']))
  ) {
    problems.push({ param: 'expires_at', message: 'expires_at must be after issued_at' });
  }
  return problems;
}

/** Checks an amount object {currency, amount}; precision beyond the currency's decimals is refused. */
export function moneyProblems(money: unknown, param: string): PayloadProblem[] {
  const rule = CAPSULE_PAYLOAD_SCHEMA.properties.amount_ceiling;
  if (typeof money !== 'object' || money === null || Array.isArray(money)) {
    return [{ param, message: `${param} must be an object {currency, amount}` }];
  }
  const m = money as Record<string, unknown>;
  const extra = Object.keys(m).filter((k) => k !== 'currency' && k !== 'amount');
  if (extra.length > 0) return [{ param: `${param}.${extra[0]}`, message: `unknown member ${extra[0]}` }];
  if (!str(m['currency']) || !new RegExp(rule.properties.currency.pattern).test(m['currency'])) {
    return [
      { param: `${param}.currency`, message: 'currency must be an upper-case code such as USD or USDC' },
    ];
  }
  if (!str(m['amount']) || !new RegExp(rule.properties.amount.pattern).test(m['amount'])) {
    return [{ param: `${param}.amount`, message: 'amount must be a decimal string such as "125.50"' }];
  }
  return [];
}

/** Decimal places of `amount` beyond what `currency` allows, or null when the precision is fine. */
export function precisionProblem(money: { currency: string; amount: string }): string | null {
  const allowed = CURRENCY_DECIMALS[money.currency] ?? 2;
  const decimals = money.amount.split('.')[1]?.length ?? 0;
  return decimals > allowed ? `${money.currency} amounts have at most ${allowed} decimal places` : null;
}

export function isCapsulePayload(value: unknown): value is CapsulePayload {
  return payloadProblems(value).length === 0;
}
