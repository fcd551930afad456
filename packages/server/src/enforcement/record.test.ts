import { describe, expect, it } from 'vitest';
import type { Verdict } from './model.js';
import { withOutcome, writeItemOf } from './record.js';

const verdict: Verdict = {
  decision: 'allow',
  reason: 'ok',
  failedConstraints: [],
  failedArgument: null,
  mode: 'deterministic',
  evaluation: 'evaluated' as never,
  approvalId: null,
};

describe('write items prepared before the tool ran', () => {
  it('completed with id, time and result hash, equal the item built afterwards', () => {
    const record = {
      scope: { organizationId: 'org', projectId: null } as never,
      call: {
        toolName: 'echo',
        arguments: { message: 'hi', n: [1, 2] },
        context: { session_id: 's', source: 'mcp' },
      },
      verdict,
      policy: null,
      source: 'server' as const,
      latencyMs: 1.5,
      session: { sessionId: 's', calls: 3, cumulative: { n: 2 } } as never,
      bindings: { client_id: 'k', connection_id: 'c', upstream_id: 'u' },
    };
    for (const resultHash of [`sha256:${'a'.repeat(64)}`, undefined]) {
      const after = writeItemOf({ ...record, decisionId: 'd1', now: '2026-01-01T00:00:00.000Z', resultHash });
      const before = writeItemOf({ ...record, decisionId: '', now: '', resultHash: undefined });
      expect(withOutcome(before, 'd1', '2026-01-01T00:00:00.000Z', resultHash)).toEqual(after);
    }
  });
});
