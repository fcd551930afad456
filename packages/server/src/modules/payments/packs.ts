import { Environment } from '@marcbachmann/cel-js';
import { canonicalJson, hashJson } from '../../ledger/canonical.js';
import {
  boundCondition,
  type CelNode,
  COST_BUDGET,
  ConditionBoundError,
  PAYMENT_STRING_BOUNDS,
} from './condition-bounds.js';
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

type Parsed = ReturnType<typeof env.parse>;
interface Compiled {
  run: Parsed;
  /** Worst-case evaluation steps (condition-bounds.ts). */
  cost: number;
}
/**
 * Whether `matches` runs the RE2 search condition-bounds.ts gives it rather than the CEL library's
 * backtracking RegExp: `\Q…\E` quotes a literal in RE2 only. Checked once; if a later library
 * evaluates calls differently, every condition calling matches() is refused (fail closed).
 */
const regexSearchIsRe2 = (() => {
  try {
    const probe = env.parse('"a.b".matches("^\\\\Qa.b\\\\E$")');
    if (!probe.check().valid) return false;
    boundCondition(probe.ast as unknown as CelNode, { matches: true });
    return probe({ payment: {} }) === true;
  } catch {
    return false;
  }
})();

/** Compiled conditions and the problem of those that cannot be, by expression (also at consume). */
const cache = new Map<string, Compiled | string>();

/**
 * Parses and type-checks a condition, which must be a boolean expression over `payment`, and bounds
 * its worst-case cost (a condition that cannot be bounded, or costs more than a pack may, is refused).
 */
export function compileCondition(expression: string, param: string): Compiled {
  let hit = cache.get(expression);
  if (hit === undefined) {
    hit = compile(expression);
    if (cache.size > 1000) cache.clear();
    cache.set(expression, hit);
  }
  if (typeof hit === 'string') throw gatewayError.invalidRequest(`${param} ${hit}`, param);
  return hit;
}

function compile(expression: string): Compiled | string {
  let parsed: Parsed;
  try {
    parsed = env.parse(expression);
  } catch (err) {
    return `does not parse: ${firstLine(err)}`;
  }
  const checked = parsed.check();
  if (!checked.valid) return `does not type-check: ${firstLine(checked.error)}`;
  if (checked.type !== 'bool') return `must be a boolean expression, not ${checked.type}`;
  let cost: number;
  try {
    cost = boundCondition(parsed.ast as unknown as CelNode, { matches: regexSearchIsRe2 });
  } catch (err) {
    if (err instanceof ConditionBoundError) return err.message;
    throw err;
  }
  if (cost > COST_BUDGET) {
    return `may take up to ${cost} steps to evaluate; a pack's conditions may take ${COST_BUDGET} together`;
  }
  return { run: parsed, cost };
}

const firstLine = (err: unknown) => String((err as Error)?.message ?? err).split('\n')[0];

/** The members of `payment` longer than conditions were bounded for (never from a valid request). */
function oversized(facts: PaymentFacts): string | undefined {
  return (Object.keys(PAYMENT_STRING_BOUNDS) as (keyof typeof PAYMENT_STRING_BOUNDS)[]).find(
    (k) => facts[k].length > PAYMENT_STRING_BOUNDS[k],
  );
}

/**
 * Evaluates every condition; the first that is false refuses, and one that fails to evaluate
 * answers policy_eval_error: an expression that cannot be evaluated never allows. So does a pack
 * saved before conditions were bounded whose conditions are now refused (a regex that is not RE2, a
 * cost above the budget): it fails closed at once instead of running.
 */
export function evaluateConditions(conditions: readonly PackCondition[], facts: PaymentFacts): void {
  const compiled: [PackCondition, Compiled][] = [];
  let total = 0;
  for (const c of conditions) {
    try {
      compiled.push([c, compileCondition(c.expression, `conditions.${c.name}`)]);
    } catch (err) {
      throw gatewayError.evalError(`condition ${c.name} cannot be evaluated: ${firstLine(err)}`, c.name);
    }
    total += compiled[compiled.length - 1]![1].cost;
  }
  if (total > COST_BUDGET) {
    throw gatewayError.evalError(
      `the pack's conditions may take up to ${total} steps to evaluate, above the limit of ${COST_BUDGET}`,
    );
  }
  const long = oversized(facts);
  if (long !== undefined) {
    throw gatewayError.evalError(`payment.${long} is longer than conditions can be evaluated on`);
  }
  for (const [c, { run }] of compiled) {
    let result: unknown;
    try {
      result = run({ payment: facts });
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
  let cost = 0;
  const conditions = (input.conditions ?? []).map((c, i) => {
    if (names.has(c.name))
      throw gatewayError.invalidRequest(`condition ${c.name} is named twice`, `conditions.${i}.name`);
    names.add(c.name);
    cost += compileCondition(c.expression, `conditions.${i}.expression`).cost;
    if (cost > COST_BUDGET) {
      throw gatewayError.invalidRequest(
        `conditions.${i}.expression takes the pack's conditions to up to ${cost} steps to evaluate; they may take ${COST_BUDGET} together`,
        `conditions.${i}.expression`,
      );
    }
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
