import { describe, expect, it } from 'vitest';
import corpus from '../corpus/corpus.json' with { type: 'json' };
import {
  CONSTRAINT_TYPES,
  compilePolicy,
  type Evaluation,
  evaluate,
  evaluateSession,
  mergeEvaluation,
  type PolicyDefinition,
  type SessionIncrements,
  type SessionState,
  sessionIncrements,
} from './index.js';

/** One shared case file: the server and the SDK must both pass every case. */
interface CorpusCase {
  name: string;
  policy: PolicyDefinition;
  arguments: Record<string, unknown>;
  session?: { state: SessionState; increments?: SessionIncrements };
  expected: {
    decision: Evaluation['decision'];
    failedConstraints: { parameter: string; constraint_type: string }[];
  };
}

const cases = corpus as unknown as CorpusCase[];

function run(c: CorpusCase): Evaluation {
  const evaluation = evaluate(compilePolicy(c.policy), c.arguments);
  if (!c.session) return evaluation;
  return mergeEvaluation(
    evaluation,
    evaluateSession(c.policy.sessionConstraints, c.session.state, c.arguments),
  );
}

describe('policy corpus', () => {
  it('has at least 60 cases with unique names', () => {
    expect(cases.length).toBeGreaterThanOrEqual(60);
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
  });

  it.each(cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const result = run(c);
    expect({
      decision: result.decision,
      failedConstraints: result.failedConstraints.map(({ parameter, constraint_type }) => ({
        parameter,
        constraint_type,
      })),
    }).toEqual(c.expected);
    // Invariants every result honours.
    expect(result.reason === null).toBe(result.decision === 'allow');
    expect(result.failedArgument).toBe(result.failedConstraints[0]?.parameter || null);
    for (const f of result.failedConstraints) {
      expect(CONSTRAINT_TYPES).toContain(f.constraint_type);
      expect(f.message.length).toBeGreaterThan(0);
    }
    if (c.session?.increments) {
      expect(sessionIncrements(c.policy.sessionConstraints, c.arguments)).toEqual(c.session.increments);
    }
  });

  it('covers every constraint_type that JSON input can produce', () => {
    const seen = new Set(cases.flatMap((c) => c.expected.failedConstraints.map((f) => f.constraint_type)));
    // `unevaluable` needs a throwing getter or proxy, which JSON cannot carry (see evaluate.test.ts).
    const reachable = CONSTRAINT_TYPES.filter((t) => t !== 'unevaluable');
    expect([...seen].sort()).toEqual([...reachable].sort());
  });
});
