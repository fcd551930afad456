import { describe, expect, it } from 'vitest';
import { COST_BUDGET, MAX_COMPREHENSION_DEPTH } from './condition-bounds.js';
import { GatewayError } from './model.js';
import { compileCondition, evaluateConditions, type PaymentFacts, packContent } from './packs.js';

const FACTS: PaymentFacts = {
  amount: 1,
  currency: 'USD',
  rail: 'ach',
  entity_id: 'acme-eu',
  agent_id: 'buyer-7',
  beneficiary: `sha256:${'f'.repeat(64)}`,
  invoice_hash: '',
  ceiling_amount: 3,
};

const list = (n: number) => `[${Array.from({ length: n }, (_, i) => i).join(',')}]`;
/** `list.all(a, list.all(b, … true))`, `depth` deep: the hunt's 6 deep over 25 members blocked 10.6 s. */
const nested = (n: number, depth: number) => {
  let e = 'true';
  for (let i = 0; i < depth; i++) e = `${list(n)}.all(v${i}, ${e})`;
  return e;
};

/** The catalog error a call throws. */
function errorOf(f: () => unknown) {
  try {
    f();
  } catch (err) {
    if (err instanceof GatewayError) return err;
    throw err;
  }
  throw new Error('expected an error');
}

const saved = (expression: string) =>
  errorOf(() => packContent({ allowed_rails: ['ach'], conditions: [{ name: 'c', expression }] })).body;

const run = (expression: string, facts: Partial<PaymentFacts> = {}) =>
  errorOf(() => evaluateConditions([{ name: 'c', expression }], { ...FACTS, ...facts })).body;

describe('pack conditions are bounded when saved', () => {
  it('searches with RE2: a pattern catastrophic for backtracking answers at once', () => {
    // RE2 syntax, as CEL specifies: \Q…\E quotes (RegExp would read it as the letters Q and E).
    expect(() =>
      evaluateConditions(
        [{ name: 'q', expression: 'payment.entity_id.matches("^\\\\Qacme-eu\\\\E$")' }],
        FACTS,
      ),
    ).not.toThrow();
    const slug = 'payment.entity_id.matches("^([a-z0-9]+-?)*$")';
    packContent({ allowed_rails: ['ach'], conditions: [{ name: 'slug', expression: slug }] });
    expect(() => evaluateConditions([{ name: 'slug', expression: slug }], FACTS)).not.toThrow();
    const started = Date.now();
    // With RegExp this search took 63 s for 29 characters (twice as long per character more); RE2 is
    // linear in the input.
    expect(run(slug, { entity_id: `${'a'.repeat(28)}!` }).code).toBe('policy_condition_failed');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('refuses patterns RE2 cannot search, and patterns that are not literals', () => {
    for (const pattern of ['(a)\\\\1', '^(?=a)', '(?<!x)a', '[']) {
      const err = saved(`payment.entity_id.matches("${pattern}")`);
      expect([err.code, err.param]).toEqual(['invalid_request', 'conditions.0.expression']);
      expect(err.message).toMatch(/unusable: it does not compile as an RE2 pattern/);
    }
    expect(saved(`payment.entity_id.matches("${'a'.repeat(257)}")`).message).toMatch(/the limit is 256/);
    expect(saved('payment.entity_id.matches(payment.agent_id)').message).toMatch(/not a string literal/);
    // A pattern whose search of an entity id (up to 400 UTF-16 units) would outrun its work budget.
    expect(saved('payment.entity_id.matches("(?:.*x.*){1000}[^x]")').message).toMatch(
      /searches strings of up to 400 characters .* at most \d+ within its work budget/,
    );
  });

  it('refuses comprehensions nested too deep, and conditions whose worst case is above the budget', () => {
    // The hunt's condition: six comprehensions over 25 members (~700 characters).
    const six = saved(nested(25, 6));
    expect([six.code, six.param]).toEqual(['invalid_request', 'conditions.0.expression']);
    expect(six.message).toMatch(`more than ${MAX_COMPREHENSION_DEPTH} deep`);
    expect(() => compileCondition(nested(25, MAX_COMPREHENSION_DEPTH), 'x')).not.toThrow();
    // Three deep within the depth, but 100 × 100 × 100 members.
    const wide = saved(nested(100, 3));
    expect(wide.message).toMatch(`steps to evaluate; a pack's conditions may take ${COST_BUDGET} together`);
    // Strings doubled by bindings: 9 doublings of an entity id (400 units) make 204,800 units.
    let doubled = 'payment.entity_id';
    for (let i = 0; i < 9; i++) doubled = `cel.bind(s${i}, ${doubled}, s${i} + s${i})`;
    expect(saved(`${list(10)}.all(x, (${doubled}).size() > 0)`).message).toMatch(/steps to evaluate/);
    // The budget is the pack's: conditions each within it, above it together, are refused.
    const half = `${list(50)}.all(a, ${list(50)}.all(b, ${list(12)}.all(c, c >= 0)))`;
    const cost = compileCondition(half, 'x').cost;
    expect(cost).toBeLessThanOrEqual(COST_BUDGET);
    expect(cost * 2).toBeGreaterThan(COST_BUDGET);
    const both = errorOf(() =>
      packContent({
        allowed_rails: ['ach'],
        conditions: [
          { name: 'a', expression: half },
          { name: 'b', expression: `${half} && true` },
        ],
      }),
    ).body;
    expect([both.param, both.message]).toEqual([
      'conditions.1.expression',
      expect.stringMatching(/takes the pack's conditions to up to \d+ steps/),
    ]);
  });

  it('refuses functions it cannot bound, and keeps the usual ones', () => {
    expect(saved('timestamp("2026-01-01T00:00:00Z") < timestamp("2027-01-01T00:00:00Z")').message).toMatch(
      /calls timestamp\(\), which conditions do not support/,
    );
    for (const ok of [
      'payment.amount <= 900.0 && payment.rail != "wire"',
      'payment.entity_id in ["acme-eu", "globex"]',
      'payment.entity_id.startsWith("acme-") && payment.agent_id.endsWith("-7")',
      'payment.entity_id.split("-").exists(p, p == "eu") && size(payment.invoice_hash) == 0',
      'payment.beneficiary.contains("ff") && payment.entity_id.lowerAscii().upperAscii().size() > 0',
      '[1.0, 2.0].map(x, x * 2.0).filter(y, y > 1.0).size() == 2 && has(payment.rail)',
      'int(payment.ceiling_amount) >= 0 && string(payment.amount) != "" && double("1.5") > 1.0',
      'cel.bind(e, payment.entity_id, e.substring(0, 4) == "acme" && e.indexOf("-") == 4)',
    ]) {
      expect(() => compileCondition(ok, 'x'), ok).not.toThrow();
      expect(() => evaluateConditions([{ name: 'ok', expression: ok }], FACTS), ok).not.toThrow();
    }
  });
});

describe('pack conditions stored before they were bounded', () => {
  it('fail closed at consume, at once: policy_eval_error, never a run', () => {
    const started = Date.now();
    for (const expression of [
      'payment.entity_id.matches("^(?=a)")',
      'timestamp("2026-01-01T00:00:00Z") < timestamp("2027-01-01T00:00:00Z")',
      nested(100, 3),
      nested(25, 6),
    ]) {
      const err = run(expression);
      expect([err.code, err.param], expression).toEqual(['policy_eval_error', 'c']);
      expect(err.message).toMatch(/^condition c cannot be evaluated: /);
    }
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('refuses a pack whose conditions are above the budget together, and facts longer than bounded', () => {
    const half = `${list(50)}.all(a, ${list(50)}.all(b, ${list(12)}.all(c, c >= 0)))`;
    const err = errorOf(() =>
      evaluateConditions(
        [
          { name: 'a', expression: half },
          { name: 'b', expression: `${half} && true` },
        ],
        FACTS,
      ),
    ).body;
    expect([err.code, err.message]).toEqual(['policy_eval_error', expect.stringMatching(/above the limit/)]);
    const long = run('payment.entity_id.size() > 0', { entity_id: 'x'.repeat(401) });
    expect([long.code, long.message]).toEqual([
      'policy_eval_error',
      'payment.entity_id is longer than conditions can be evaluated on',
    ]);
  });
});
