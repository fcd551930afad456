/**
 * The setup the in-process gateway benches share (bench/gateway-phases.ts, bench/gateway-heap.ts):
 * a tenant on the enterprise tier (so the rate limit does not cap the calls), a policy that the
 * `echo` call below passes (the gateway evaluates it and records the decision with its receipt),
 * and the given server-everything as upstream `e` (its gateway path is /v1/mcp/e).
 */
import { createTenant, type Tenant, type TestApp } from '../packages/server/test/helpers.js';
import { createUpstream, putPolicy, setTier } from '../packages/server/test/mcp-helpers.js';

export const ECHO_CALL = { name: 'echo', arguments: { message: 'hello gateway' } };

export async function echoTenant(t: TestApp, upstreamUrl: string): Promise<Tenant> {
  const tenant = await createTenant(t);
  await setTier(t, tenant.orgId, 'enterprise', 1_000_000);
  await putPolicy(t, tenant.orgId, 'echo', {
    mode: 'deterministic',
    constraints: [
      { argumentName: 'message', enabled: true, required: true, maxLength: 100, regex: '^[a-z ]+$' },
    ],
  });
  await createUpstream(t, tenant, { name: 'e', slug: 'e', url: upstreamUrl, timeoutMs: 5000 });
  return tenant;
}
