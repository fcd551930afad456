import corpus from '@svc/policy-engine/corpus.json' with { type: 'json' };
import type { Client, ValidationResult } from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTier } from '../../server/test/approvals.js';
import { useTestApp } from '../../server/test/fixture.js';
import { keyHeader, type Tenant } from '../../server/test/helpers.js';
import { connectedClient, createTenant, putPolicy } from './live.js';

interface CorpusCase {
  name: string;
  policy: Record<string, unknown> & { sessionConstraints?: unknown };
  arguments: Record<string, unknown>;
  session?: { state: { calls: number } };
  expected: { decision: string; failedConstraints: { parameter: string; constraint_type: string }[] };
}

/**
 * Every corpus case through the SDK and through POST /v1/tools/validate of a live server: the same
 * decision, reason and failed constraints. Cases the SDK may decide alone must be decided locally.
 */
const cases = (corpus as unknown as CorpusCase[]).map((c, i) => ({ ...c, tool: `corpus-${i}` }));

let tenant: Tenant;
let client: Client;
const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  tenant = await createTenant(t);
  await setTier(t, tenant, 'team'); // require_approval cases answer require_approval, not a plan denial
  for (const c of cases) await putPolicy(t, tenant, c.tool, c.policy);
  client = await connectedClient(t.url, tenant);
});
afterAll(async () => {
  await client.close();
});

const shape = (r: Pick<ValidationResult, 'decision' | 'reason' | 'failedConstraints'>) => ({
  decision: r.decision,
  reason: r.reason,
  failedConstraints: r.failedConstraints,
});

describe('policy corpus: SDK local path vs the server', () => {
  it('runs every case', () => {
    expect(cases.length).toBeGreaterThanOrEqual(100);
  });

  it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    // Session state is the server's alone: those cases start a fresh session, on both paths.
    const context = c.policy.sessionConstraints ? { session_id: `s-${c.tool}-${Math.random()}` } : undefined;
    const sdk = await client.validate(c.tool, c.arguments, context);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: {
        tool_name: c.tool,
        arguments: c.arguments,
        ...(context ? { context: { session_id: `${context.session_id}-server` } } : {}),
      },
    });
    const server = res.json();
    expect(shape(sdk)).toEqual(
      shape({
        decision: server.decision,
        reason: server.reason,
        failedConstraints: server.failed_constraints ?? [],
      }),
    );
    const local =
      c.policy.mode === 'deterministic' &&
      !c.policy.sessionConstraints &&
      c.expected.decision !== 'require_approval';
    expect(sdk.source).toBe(local ? 'local' : 'server');
    if (c.policy.mode === 'llm') {
      // The server hands llm policies to its judge (none is configured here): it denies and says why,
      // in its own terms rather than the engine's fallback.
      expect(sdk.decision).toBe('deny');
      expect(c.expected.decision).toBe('deny');
    } else if (!c.session || c.session.state.calls === 0) {
      expect({
        decision: sdk.decision,
        failedConstraints: sdk.failedConstraints.map(({ parameter, constraint_type }) => ({
          parameter,
          constraint_type,
        })),
      }).toEqual(c.expected);
    }
  });
});
