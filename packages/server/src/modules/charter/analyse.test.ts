import { describe, expect, it } from 'vitest';
import { analyse, describeChange, EXAMPLE_MAX, proposeDefinition } from './analyse.js';
import type { CompiledRule, ToolInfo } from './model.js';

const TOOL: ToolInfo = {
  name: 'wire',
  description: null,
  arguments: [
    { name: 'amount', type: 'number', maximum: 10_000 },
    { name: 'currency', type: 'string', enum: ['USD', 'EUR'] },
  ],
};

const kinds = (def: Parameters<typeof analyse>[1]) => analyse(TOOL, def, []).findings.map((f) => f.kind);

describe('analyse', () => {
  it('flags an argument the tool does not have', () => {
    expect(kinds({ mode: 'deterministic', constraints: [{ argumentName: 'fee', maximum: 5 }] })).toContain(
      'unknown_argument',
    );
  });

  it('flags rules that can never stop a call the tool accepts', () => {
    const findings = analyse(
      TOOL,
      {
        mode: 'deterministic',
        constraints: [
          { argumentName: 'amount', maximum: 50_000 },
          { argumentName: 'currency', enum: ['USD', 'EUR', 'JPY'] },
        ],
      },
      [],
    ).findings;
    expect(findings.filter((f) => f.kind === 'never_matches')).toHaveLength(3);
  });

  it('flags the looser of two bounds on one side of a rule: a limit raised into a rule that keeps the lower one', () => {
    const messages = analyse(
      TOOL,
      {
        mode: 'deterministic',
        constraints: [
          { argumentName: 'amount', maximum: 1000, lessThan: 2000 },
          { argumentName: 'amount', minimum: 5, greaterThan: 10 },
        ],
      },
      [],
    )
      .findings.filter((f) => f.kind === 'never_matches')
      .map((f) => f.message);
    expect(messages).toEqual([
      '"amount" less than 2000 never stops a call: at most 1000 already stops more.',
      '"amount" at least 5 never stops a call: more than 10 already stops more.',
    ]);
  });

  it('flags a policy that stops every call, and one that stops none', () => {
    expect(
      kinds({
        mode: 'deterministic',
        constraints: [
          { argumentName: 'amount', minimum: 20_000 },
          { argumentName: 'amount', maximum: 10 },
        ],
      }),
    ).toContain('blocks_everything');
    expect(kinds({ mode: 'deterministic', constraints: [] })).toContain('allows_everything');
  });

  it('gives example calls the engine itself decided', () => {
    const { examples } = analyse(
      TOOL,
      {
        mode: 'deterministic',
        constraints: [{ argumentName: 'amount', maximum: 100, action: 'require_approval' }],
      },
      [],
    );
    expect(examples[0]).toMatchObject({ decision: 'allow', arguments: { amount: 10, currency: 'USD' } });
    expect(examples).toContainEqual(
      expect.objectContaining({ decision: 'require_approval', arguments: { amount: 101, currency: 'USD' } }),
    );
  });

  it('builds no example value past EXAMPLE_MAX, however large a length or item bound is', () => {
    const tool: ToolInfo = {
      name: 'post',
      description: null,
      arguments: [
        { name: 'text', type: 'string' },
        { name: 'tags', type: 'array' },
      ],
    };
    const longest = (examples: { arguments: Record<string, unknown> }[]) =>
      Math.max(
        0,
        ...examples.flatMap((e) =>
          Object.values(e.arguments).map((v) => (typeof v === 'string' || Array.isArray(v) ? v.length : 0)),
        ),
      );
    const upper = analyse(
      tool,
      {
        mode: 'deterministic',
        constraints: [
          { argumentName: 'text', maxLength: 10_000_000_000_000 },
          { argumentName: 'tags', maxItems: 1_000_000_000_000 },
        ],
      },
      [],
    );
    expect(upper.examples[0]).toMatchObject({ decision: 'allow' });
    expect(longest(upper.examples)).toBeLessThanOrEqual(EXAMPLE_MAX);
    // A bound just under the limit still shows the call just past it.
    const near = analyse(
      tool,
      { mode: 'deterministic', constraints: [{ argumentName: 'text', maxLength: EXAMPLE_MAX - 1 }] },
      [],
    );
    expect(near.examples).toContainEqual(
      expect.objectContaining({ decision: 'deny', arguments: { text: 'x'.repeat(EXAMPLE_MAX), tags: [] } }),
    );
    // A call that would need more items than can be shown is not shown, nor called a block-all.
    const lower = analyse(
      tool,
      { mode: 'deterministic', constraints: [{ argumentName: 'tags', minItems: 100_000 }] },
      [],
    );
    expect(lower.examples).toEqual([]);
    expect(lower.findings.map((f) => f.kind)).not.toContain('blocks_everything');
  });
});

describe('proposeDefinition', () => {
  it('merges rules into the current policy, narrowing lists instead of contradicting them', () => {
    const current = {
      mode: 'deterministic' as const,
      constraints: [{ argumentName: 'currency', enabled: true, enum: ['USD', 'EUR'] }],
      sessionConstraints: { maxCalls: 10 },
    };
    const def = proposeDefinition(current, [
      {
        toolName: 'wire',
        text: '',
        summary: '',
        constraint: { argumentName: 'currency', enabled: true, notEnum: ['EUR'] },
      },
      { toolName: 'wire', text: '', summary: '', maxCalls: 3 },
      { toolName: 'wire', text: '', summary: '', cumulative: { argumentName: 'amount', maxValue: 500 } },
    ]);
    expect(def).toEqual({
      mode: 'deterministic',
      constraints: [{ argumentName: 'currency', enabled: true, enum: ['USD'] }],
      sessionConstraints: { maxCalls: 3, cumulativeLimits: [{ argumentName: 'amount', maxValue: 500 }] },
      llmConfig: null,
    });
  });

  it('answers a proposal the engine cannot compile as invalid, with its problems, without analysing it', () => {
    const rule = (constraint: CompiledRule['constraint']): CompiledRule => ({
      toolName: 'wire',
      text: '',
      summary: '',
      constraint,
    });
    for (const constraint of [
      { argumentName: 'currency', enabled: true, regex: '(' },
      { argumentName: 'currency', enabled: true, regex: 'x'.repeat(300) },
      { argumentName: 'currency', enabled: true, maxLength: -3 },
      { argumentName: 'currency', enabled: true, maxLength: 1.5 },
    ]) {
      const change = describeChange('wire', TOOL, null, [rule(constraint)]);
      expect(change.proposed.constraints).toEqual([constraint]);
      expect(change.quality).toMatchObject({ valid: false, score: 0 });
      expect(change.quality.issues.join(' ')).toContain('Constraint 1 on "currency"');
      expect(change.analysis).toEqual({ findings: [], examples: [] });
    }
  });

  it('says when rules would replace an llm policy', () => {
    const change = describeChange(
      'wire',
      TOOL,
      { version: 3, definition: { mode: 'llm', llmConfig: { description: 'x' } } },
      [],
    );
    expect(change.analysis.findings[0]!.kind).toBe('replaces_llm_policy');
  });
});
