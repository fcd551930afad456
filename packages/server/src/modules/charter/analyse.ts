import {
  type Constraint,
  checkPolicyDefinition,
  compilePolicy,
  evaluate,
  type PolicyDefinition,
  scorePolicy,
  type ToolArgument,
} from '@svc/policy-engine';
import { patternCountProblem } from '../policies/model.js';
import type {
  Analysis,
  CompiledRule,
  CurrentPolicy,
  ExampleCall,
  Finding,
  PolicyChange,
  ToolInfo,
} from './model.js';

const enabled = (def: PolicyDefinition) => (def.constraints ?? []).filter((c) => c.enabled !== false);

/**
 * The longest string or array an example call carries. A length or item bound can be any whole
 * number ("at most 10000000000 characters"): a value just past it cannot be built, nor shown.
 */
export const EXAMPLE_MAX = 1000;

/** A value an example would need but that is longer than EXAMPLE_MAX. */
const TOO_LONG = Symbol('too long');

/**
 * The policy a tool would have with the rules added: a rule on the same argument and outcome as an
 * existing constraint replaces the fields it names; session limits replace the same limit.
 */
export function proposeDefinition(current: PolicyDefinition | null, rules: CompiledRule[]): PolicyDefinition {
  const base = current?.mode === 'deterministic' ? current : null;
  const constraints: Constraint[] = (base?.constraints ?? []).map((c) => ({ ...c }));
  const session = { ...(base?.sessionConstraints ?? {}) };
  const cumulative = [...(session.cumulativeLimits ?? [])];
  for (const rule of rules) {
    if (rule.constraint) {
      const action = rule.constraint.action ?? 'deny';
      const same = constraints.find(
        (c) =>
          c.argumentName === rule.constraint!.argumentName &&
          (c.action ?? 'deny') === action &&
          c.enabled !== false,
      );
      const refused = rule.constraint.notEnum;
      if (same?.enum && refused && Object.keys(rule.constraint).length === 3) {
        // Refusing listed values narrows the list instead of contradicting it.
        same.enum = same.enum.filter((v) => !refused.includes(v));
      } else if (same) Object.assign(same, rule.constraint);
      else constraints.push({ ...rule.constraint });
    }
    if (rule.maxCalls !== undefined) session.maxCalls = rule.maxCalls;
    if (rule.cumulative) {
      const i = cumulative.findIndex((l) => l.argumentName === rule.cumulative!.argumentName);
      if (i >= 0) cumulative[i] = rule.cumulative;
      else cumulative.push(rule.cumulative);
    }
  }
  if (cumulative.length > 0) session.cumulativeLimits = cumulative;
  const hasSession = session.maxCalls !== undefined || (session.cumulativeLimits?.length ?? 0) > 0;
  return {
    mode: 'deterministic',
    constraints,
    sessionConstraints: hasSession ? session : null,
    llmConfig: current?.llmConfig ?? null,
  };
}

/** Whether one value passes the given constraints (the engine decides, so examples never lie). */
function passes(constraints: Constraint[], name: string, value: unknown): boolean {
  const own = constraints
    .filter((c) => c.argumentName === name)
    .map((c) => ({ ...c, action: 'deny' as const }));
  if (own.length === 0) return true;
  return (
    evaluate(compilePolicy({ mode: 'deterministic', constraints: own }), { [name]: value }).decision ===
    'allow'
  );
}

function numberSample(arg: ToolArgument | null, cs: Constraint[]): number {
  const lows = [
    arg?.minimum,
    ...cs.flatMap((c) => [
      c.minimum,
      c.greaterThanOrEqual,
      c.greaterThan === undefined ? undefined : c.greaterThan + 1,
    ]),
  ];
  const highs = [
    arg?.maximum,
    ...cs.flatMap((c) => [
      c.maximum,
      c.lessThanOrEqual,
      c.lessThan === undefined ? undefined : c.lessThan - 1,
    ]),
  ];
  const lo = Math.max(...lows.filter((v): v is number => v !== undefined));
  const hi = Math.min(...highs.filter((v): v is number => v !== undefined));
  if (Number.isFinite(lo)) return lo;
  if (Number.isFinite(hi)) return Math.min(hi, 10);
  return 10;
}

function valueFor(
  arg: ToolArgument | null,
  name: string,
  constraints: Constraint[],
  hints: unknown[],
): unknown {
  const cs = constraints.filter((c) => c.argumentName === name && c.enabled !== false);
  const type =
    arg?.type ??
    (cs.some(
      (c) =>
        c.maximum !== undefined ||
        c.minimum !== undefined ||
        c.lessThan !== undefined ||
        c.greaterThan !== undefined,
    )
      ? 'number'
      : 'string');
  if (type === 'number') return numberSample(arg, cs);
  if (type === 'boolean') return true;
  if (type === 'object') return {};
  if (type === 'array') {
    const min = Math.max(0, ...cs.map((c) => c.minItems ?? 0));
    if (min > EXAMPLE_MAX) return TOO_LONG;
    return Array.from({ length: min }, (_, i) => `item-${i + 1}`);
  }
  const candidates = [
    ...hints,
    ...cs.flatMap((c) => c.enum ?? []),
    ...(arg?.enum ?? []),
    'example',
    'someone@example.com',
    'https://example.com',
    'INV-1001',
    'ABC123',
    '1',
  ];
  return candidates.find((v) => typeof v === 'string' && passes(cs, name, v)) ?? 'example';
}

/** Values that break one constraint, one per check it makes (omit: leave the argument out). */
function violations(c: Constraint, hint: unknown): { value: unknown; omit?: boolean }[] {
  const out: { value: unknown; omit?: boolean }[] = [];
  if (c.required) out.push({ value: undefined, omit: true });
  const upper = c.maximum ?? c.lessThanOrEqual;
  if (upper !== undefined) out.push({ value: upper + 1 });
  if (c.lessThan !== undefined) out.push({ value: c.lessThan });
  const lower = c.minimum ?? c.greaterThanOrEqual;
  if (lower !== undefined) out.push({ value: lower - 1 });
  if (c.greaterThan !== undefined) out.push({ value: c.greaterThan });
  if (c.enum) out.push({ value: `not-${c.enum[0] ?? 'listed'}` });
  if (c.notEnum?.length) out.push({ value: c.notEnum[0] });
  if (c.maxLength !== undefined && c.maxLength < EXAMPLE_MAX)
    out.push({ value: 'x'.repeat(c.maxLength + 1) });
  if (c.minLength !== undefined && c.minLength > 0) out.push({ value: '' });
  if (c.maxItems !== undefined && c.maxItems < EXAMPLE_MAX)
    out.push({ value: Array.from({ length: c.maxItems + 1 }, (_, i) => `item-${i + 1}`) });
  if (c.minItems !== undefined && c.minItems > 0) out.push({ value: [] });
  if (c.regex !== undefined || c.notRegex !== undefined)
    out.push({ value: hint !== undefined ? hint : 'zz-no-match' });
  return out;
}

function judge(def: PolicyDefinition, args: Record<string, unknown>): ExampleCall {
  const e = evaluate(compilePolicy(def), args);
  return { arguments: args, decision: e.decision, reason: e.reason ?? 'every constraint is satisfied' };
}

/**
 * Reads a proposed policy as a careful reviewer would: arguments the tool does not have, rules that
 * can never match a call the tool accepts, a policy that stops every call or none, and example calls
 * (decided by the engine itself) that it allows and stops. `starter`: the policy is the one made from
 * the tool's declarations, so it is what enforces them, and a rule equal to one is no redundant rule.
 */
export function analyse(
  tool: ToolInfo | null,
  def: PolicyDefinition,
  rules: CompiledRule[],
  starter = false,
): Analysis {
  const findings: Finding[] = [];
  const declared = new Map((tool?.arguments ?? []).map((a) => [a.name, a]));
  const active = enabled(def);
  const named = [
    ...new Set([
      ...active.map((c) => c.argumentName),
      ...(def.sessionConstraints?.cumulativeLimits ?? []).map((l) => l.argumentName),
    ]),
  ];
  if (tool) {
    for (const name of named) {
      if (!declared.has(name) && !declared.has(name.split('.')[0]!)) {
        findings.push({
          kind: 'unknown_argument',
          message: `"${name}" is not an argument of "${tool.name}": the rule never sees a value and only a required check could fail.`,
        });
      }
    }
  }
  for (const c of active) {
    // Two bounds on one side of one rule: the tighter decides, and the other never stops a call (a
    // limit "raised" into a rule that keeps the lower one changes nothing).
    const upper = c.maximum ?? c.lessThanOrEqual;
    if (upper !== undefined && c.lessThan !== undefined) {
      findings.push({
        kind: 'never_matches',
        message:
          c.lessThan > upper
            ? `"${c.argumentName}" less than ${c.lessThan} never stops a call: at most ${upper} already stops more.`
            : `"${c.argumentName}" at most ${upper} never stops a call: less than ${c.lessThan} already stops more.`,
      });
    }
    const lower = c.minimum ?? c.greaterThanOrEqual;
    if (lower !== undefined && c.greaterThan !== undefined) {
      findings.push({
        kind: 'never_matches',
        message:
          c.greaterThan < lower
            ? `"${c.argumentName}" more than ${c.greaterThan} never stops a call: at least ${lower} already stops more.`
            : `"${c.argumentName}" at least ${lower} never stops a call: more than ${c.greaterThan} already stops more.`,
      });
    }
    const arg = declared.get(c.argumentName);
    if (!arg || starter) continue;
    const max = c.maximum ?? c.lessThanOrEqual;
    if (max !== undefined && arg.maximum !== undefined && max >= arg.maximum) {
      findings.push({
        kind: 'never_matches',
        message: `"${c.argumentName}" at most ${max} never stops a call: the tool already declares at most ${arg.maximum}.`,
      });
    }
    const min = c.minimum ?? c.greaterThanOrEqual;
    if (min !== undefined && arg.minimum !== undefined && min <= arg.minimum) {
      findings.push({
        kind: 'never_matches',
        message: `"${c.argumentName}" at least ${min} never stops a call: the tool already declares at least ${arg.minimum}.`,
      });
    }
    if (c.enum && arg.enum) {
      const unknown = c.enum.filter((v) => !arg.enum!.includes(v));
      if (unknown.length > 0)
        findings.push({
          kind: 'never_matches',
          message: `"${c.argumentName}" values ${unknown.map((v) => `"${v}"`).join(', ')} are not among the tool's declared values and never occur.`,
        });
      if (arg.enum.every((v) => c.enum!.includes(v)))
        findings.push({
          kind: 'never_matches',
          message: `"${c.argumentName}" allows every value the tool declares, so it never stops a call.`,
        });
    }
    if (c.notEnum && arg.enum && !c.notEnum.some((v) => arg.enum!.includes(v))) {
      findings.push({
        kind: 'never_matches',
        message: `"${c.argumentName}" refuses only values the tool never sends, so it never stops a call.`,
      });
    }
  }
  const hasSession =
    def.sessionConstraints?.maxCalls !== undefined ||
    (def.sessionConstraints?.cumulativeLimits?.length ?? 0) > 0;
  if (active.length === 0 && !hasSession) {
    findings.push({
      kind: 'allows_everything',
      message: 'The policy has no enabled rule: every call is allowed.',
    });
  }

  const hints = new Map<string, { allowed: unknown[]; denied: unknown }>();
  for (const r of rules) {
    if (!r.samples) continue;
    const h = hints.get(r.samples.argumentName) ?? { allowed: [], denied: undefined };
    if (r.samples.allowed !== undefined) h.allowed.push(r.samples.allowed);
    if (r.samples.denied !== undefined) h.denied = r.samples.denied;
    hints.set(r.samples.argumentName, h);
  }
  const argNames = tool ? [...declared.keys()] : named;
  const base: Record<string, unknown> = {};
  for (const name of argNames) {
    base[name] = valueFor(declared.get(name) ?? null, name, active, hints.get(name)?.allowed ?? []);
  }
  // No call can be shown when one of its values would be too long to build.
  if (Object.values(base).includes(TOO_LONG)) return { findings, examples: [] };
  const examples: ExampleCall[] = [judge(def, base)];
  const seen = new Set([JSON.stringify(base)]);
  for (const c of active) {
    for (const v of violations(c, hints.get(c.argumentName)?.denied)) {
      const args = { ...base };
      if (v.omit) delete args[c.argumentName];
      else args[c.argumentName] = v.value;
      const key = JSON.stringify(args);
      if (seen.has(key) || examples.length >= 10) continue;
      seen.add(key);
      examples.push(judge(def, args));
    }
  }
  if (active.length > 0 && !examples.some((e) => e.decision !== 'deny')) {
    findings.push({
      kind: 'blocks_everything',
      message: 'No example call passes: the policy appears to stop every call.',
    });
  }
  return { findings, examples };
}

/** A tool's change, ready to offer: the proposal, its quality report and the review. */
export function describeChange(
  toolName: string,
  tool: ToolInfo | null,
  current: CurrentPolicy | null,
  rules: CompiledRule[],
  /** The starter policy made from the tool's declarations, proposed instead of rules added to the current one. */
  starter?: PolicyDefinition,
): PolicyChange {
  const proposed = starter ?? proposeDefinition(current?.definition ?? null, rules);
  // More patterns than a policy may hold: a PUT refuses it before compiling any, and so does this,
  // neither scored nor analysed (both compile every pattern), as the dry run of a PUT answers.
  const tooMany = patternCountProblem(proposed);
  // A definition a PUT would refuse (a pattern RE2 does not take, a negative length...) cannot be
  // compiled, so it is not analysed: its quality report is invalid and lists the problems.
  const analysis: Analysis =
    tooMany || checkPolicyDefinition(proposed).length > 0
      ? { findings: [], examples: [] }
      : analyse(tool, proposed, rules, starter !== undefined);
  if (current?.definition.mode === 'llm') {
    analysis.findings.unshift({
      kind: 'replaces_llm_policy',
      message: `The current llm policy of "${toolName}" would be replaced by these deterministic rules.`,
    });
  }
  return {
    toolName,
    current,
    proposed,
    rules: rules.map((r) => r.summary),
    quality: tooMany ? { valid: false, score: 0, issues: [tooMany] } : scorePolicy(proposed, tool),
    analysis,
  };
}
