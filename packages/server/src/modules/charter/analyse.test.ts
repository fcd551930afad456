import { describe, expect, it } from 'vitest';
import { analyse, describeChange, proposeDefinition } from './analyse.js';
import type { ToolInfo } from './model.js';

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
