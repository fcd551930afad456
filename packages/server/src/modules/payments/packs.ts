import { Environment } from '@marcbachmann/cel-js';
import { canonicalJson, hashJson } from '../../ledger/canonical.js';
import { gatewayError, type PackCondition, type PackContent } from './model.js';
import { toMicros } from './money.js';
import { type WorkflowMapInput, workflowMapOf } from './workflows.js';

/**
 * What a pack's conditions see at consume: the runtime payment and the capsule it spends.
 * Amounts are doubles in the currency's units (CEL has no decimal type); compare with literals like 100.0.
 */
const env = new Environment({ limits: { maxAstNodes: 2000, maxDepth: 64 } }).registerVariable({
  name: 'payment',
  schema: {
    amount: 'double',
    currency: 'string',
    rail: 'string',
    entity_id: 'string',
    agent_id: 'string',
    beneficiary: 'string',
    invoice_hash: 'string',
    ceiling_amount: 'double',
  },
});

export interface PaymentFacts {
  amount: number;
  currency: string;
  rail: string;
  entity_id: string;
  agent_id: string;
  beneficiary: string;
  /** Empty when the payment names no invoice. */
  invoice_hash: string;
  ceiling_amount: number;
}

type Compiled = ReturnType<typeof env.parse>;
const cache = new Map<string, Compiled>();

/** Parses and type-checks a condition; it must be a boolean expression over `payment`. */
export function compileCondition(expression: string, param: string): Compiled {
  const hit = cache.get(expression);
  if (hit) return hit;
  let parsed: Compiled;
  try {
    parsed = env.parse(expression);
  } catch (err) {
    throw gatewayError.invalidRequest(`${param} does not parse: ${firstLine(err)}`, param);
  }
  const checked = parsed.check();
  if (!checked.valid) {
    throw gatewayError.invalidRequest(`${param} does not type-check: ${firstLine(checked.error)}`, param);
  }
  if (checked.type !== 'bool') {
    throw gatewayError.invalidRequest(`${param} must be a boolean expression, not ${checked.type}`, param);
  }
  if (cache.size > 1000) cache.clear();
  cache.set(expression, parsed);
  return parsed;
}

const firstLine = (err: unknown) => String((err as Error)?.message ?? err).split('\n')[0];

/**
 * Evaluates every condition; the first that is false refuses, and one that fails to evaluate
 * answers policy_eval_error: an expression that cannot be evaluated never allows.
 */
export function evaluateConditions(conditions: readonly PackCondition[], facts: PaymentFacts): void {
  for (const c of conditions) {
    let result: unknown;
    try {
      result = compileCondition(c.expression, `conditions.${c.name}`)({ payment: facts });
    } catch (err) {
      throw gatewayError.evalError(`condition ${c.name} failed to evaluate: ${firstLine(err)}`, c.name);
    }
    if (result !== true) {
      if (result !== false)
        throw gatewayError.evalError(`condition ${c.name} did not answer a boolean`, c.name);
      throw gatewayError.conditionFailed(`condition ${c.name} does not hold for this payment`, c.name);
    }
  }
}

export interface PackInput {
  entity_caps?: { usd_24h?: string | null; usd_7d?: string | null; usd_30d?: string | null };
  approval_threshold_usd?: string | null;
  dual_control_threshold_usd?: string | null;
  allowed_rails: string[];
  invoice_required?: boolean;
  quarantine_seconds?: number;
  max_ttl_seconds?: number;
  conditions?: PackCondition[];
  workflow?: WorkflowMapInput;
}

const usd = (v: string | null | undefined, param: string): string | null => {
  if (v === undefined || v === null) return null;
  toMicros(v, param);
  if ((v.split('.')[1]?.length ?? 0) > 2) {
    throw gatewayError.precision('USD amounts have at most 2 decimal places', param);
  }
  return v;
};

/** The stored content of a pack: defaults filled in, amounts and conditions checked. */
export function packContent(input: PackInput): PackContent {
  const names = new Set<string>();
  const conditions = (input.conditions ?? []).map((c, i) => {
    if (names.has(c.name))
      throw gatewayError.invalidRequest(`condition ${c.name} is named twice`, `conditions.${i}.name`);
    names.add(c.name);
    compileCondition(c.expression, `conditions.${i}.expression`);
    return { name: c.name, expression: c.expression };
  });
  if (new Set(input.allowed_rails).size !== input.allowed_rails.length) {
    throw gatewayError.invalidRequest('allowed_rails must be distinct', 'allowed_rails');
  }
  return {
    entity_caps: {
      usd_24h: usd(input.entity_caps?.usd_24h, 'entity_caps.usd_24h'),
      usd_7d: usd(input.entity_caps?.usd_7d, 'entity_caps.usd_7d'),
      usd_30d: usd(input.entity_caps?.usd_30d, 'entity_caps.usd_30d'),
    },
    approval_threshold_usd: usd(input.approval_threshold_usd, 'approval_threshold_usd'),
    dual_control_threshold_usd: usd(input.dual_control_threshold_usd, 'dual_control_threshold_usd'),
    allowed_rails: [...input.allowed_rails].sort(),
    invoice_required: input.invoice_required ?? false,
    quarantine_seconds: input.quarantine_seconds ?? 86_400,
    max_ttl_seconds: input.max_ttl_seconds ?? 3600,
    conditions,
    // Only a pack that defines its own workflow map carries one (the hash of others is unchanged).
    ...(input.workflow !== undefined ? { workflow: workflowMapOf(input.workflow) } : {}),
  };
}

/** sha256:<hex> of the pack content's RFC 8785 canonical JSON (the capsule's policy_sha256). */
export const packSha256 = (content: PackContent): string => hashJson(content);
export const packJson = (content: PackContent): string => canonicalJson(content);
