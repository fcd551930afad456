import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { resolveApproval } from '../../test/approvals.js';
import { useTestApp } from '../../test/fixture.js';
import {
  ADMIN_TOKEN,
  bearer,
  createTenant,
  expectError,
  keyHeader,
  type Tenant,
  withTestApp,
} from '../../test/helpers.js';
import { createUpstream, gatewayClient, setTier } from '../../test/mcp-helpers.js';
import { type McpUpstream, startMcpUpstream } from '../../test/mcp-upstream.js';
import { SseClient, waitFor } from '../../test/streams.js';
import type { Clock } from '../lib/clock.js';

let upstream: McpUpstream;

// A fixed clock keeps the one-call-per-minute window below from rolling over between its two calls.
const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };
const t = useTestApp({}, { listen: true, clock });
beforeAll(async () => {
  upstream = await startMcpUpstream({ transport: 'streamable' });
});
afterAll(async () => {
  await upstream.close();
});

async function scrape(): Promise<string> {
  const res = await t.inject({ method: 'GET', url: '/metrics', headers: bearer(ADMIN_TOKEN) });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.body;
}

/** The value of one sample (`name{labels} value`), 0 when the series does not exist yet. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

const validate = (tenant: Tenant, args: Record<string, unknown>) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: 'wire', arguments: args },
  });

describe('GET /metrics', () => {
  it('is not public: no token, an API key, a user token or a wrong admin token get 401', async () => {
    const tenant = await createTenant(t);
    for (const headers of [{}, keyHeader(tenant.apiKey), bearer(tenant.token), bearer('not-the-token')]) {
      expectError(await t.inject({ method: 'GET', url: '/metrics', headers }), 401, 'unauthorized');
    }
  });

  it('answers 401 to everyone when no admin token is configured', async () => {
    await withTestApp({ adminToken: null }, async (bare) => {
      expectError(
        await bare.inject({ method: 'GET', url: '/metrics', headers: bearer(ADMIN_TOKEN) }),
        401,
        'unauthorized',
      );
    });
  });

  it('reports process metrics', async () => {
    const text = await scrape();
    expect(text).toMatch(/^process_cpu_user_seconds_total \d/m);
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds \d/m);
    expect(text).toMatch(/^process_resident_memory_bytes \d/m);
  });

  it('moves the counters with traffic: decisions, latency, group commit, approvals, rate limits', async () => {
    const before = await scrape();
    const tenant = await createTenant(t);
    await setTier(t, tenant.orgId, 'team');
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: {
        toolName: 'wire',
        constraints: [
          { argumentName: 'amount', maximum: 1000 },
          { argumentName: 'amount', maximum: 10, action: 'require_approval' },
        ],
      },
    });
    expect(policy.statusCode).toBe(201);
    expect((await validate(tenant, { amount: 5 })).json().decision).toBe('allow');
    expect((await validate(tenant, { amount: 5000 })).json().decision).toBe('deny');
    const escalated = await validate(tenant, { amount: 50 });
    expect(escalated.json().decision).toBe('require_approval');
    const approved = await resolveApproval(t, tenant, escalated.json().approval_id, 'approve');
    expect(approved.statusCode).toBe(200);

    // A limit of one call per minute: the second validate of this organization is refused.
    const limited = await createTenant(t);
    await setTier(t, limited.orgId, 'enterprise', 1);
    expect((await validate(limited, { amount: 1 })).statusCode).toBe(200);
    expectError(await validate(limited, { amount: 1 }), 429, 'rate_limit_exceeded');

    const after = await scrape();
    const moved = (series: string) => sample(after, series) - sample(before, series);
    expect(moved('svc_decisions_total{decision="allow",mode="deterministic"}')).toBe(2);
    expect(moved('svc_decisions_total{decision="deny",mode="deterministic"}')).toBe(1);
    expect(moved('svc_decisions_total{decision="require_approval",mode="deterministic"}')).toBe(1);
    expect(moved('svc_validate_duration_seconds_count{route="/v1/tools/validate",status="200"}')).toBe(4);
    expect(moved('svc_validate_duration_seconds_count{route="/v1/tools/validate",status="429"}')).toBe(1);
    expect(
      moved('svc_validate_duration_seconds_bucket{le="+Inf",route="/v1/tools/validate",status="200"}'),
    ).toBe(4);
    expect(moved('svc_decision_commit_batch_size_sum')).toBeGreaterThanOrEqual(4);
    expect(moved('svc_decision_commit_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    // Every commit is counted once, where it ran.
    expect(
      moved('svc_decision_commits_total{on="event_loop"}') + moved('svc_decision_commits_total{on="thread"}'),
    ).toBe(moved('svc_decision_commit_duration_seconds_count'));
    expect(moved('svc_approvals_total{state="requested"}')).toBe(1);
    expect(moved('svc_approvals_total{state="approved"}')).toBe(1);
    expect(moved('svc_rate_limit_rejections_total{limit="validate"}')).toBe(1);
    // Operator-wide figures: nothing names a tenant.
    for (const id of [tenant.orgId, tenant.projectId, limited.orgId]) expect(after).not.toContain(id);
  });

  it('counts open event streams while they are open', async () => {
    const tenant = await createTenant(t);
    const sse = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(tenant.apiKey));
    try {
      expect(sse.status).toBe(200);
      await waitFor(
        async () => sample(await scrape(), 'svc_open_streams{kind="sse"}') === 1,
        'one open stream',
      );
    } finally {
      sse.close();
    }
    await waitFor(async () => sample(await scrape(), 'svc_open_streams{kind="sse"}') === 0, 'stream closed');
  });

  it('counts MCP upstream requests by method and outcome, with their latency', async () => {
    const before = await scrape();
    const tenant = await createTenant(t);
    const slug = 'metrics-up';
    await createUpstream(t, tenant, {
      name: slug,
      slug,
      transport: 'mcp-streamable-http',
      url: upstream.url,
    });
    const { client } = await gatewayClient(t.url, slug, tenant.apiKey);
    try {
      await client.listTools();
      await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
      // A method of the client's own invention is forwarded, but its name is no label.
      await client
        .request({ method: 'acme-customer-42/secret', params: {} }, z.object({}).passthrough())
        .catch(() => {});
    } finally {
      await client.close();
    }
    const after = await scrape();
    const moved = (series: string) => sample(after, series) - sample(before, series);
    expect(after).not.toContain('acme-customer-42');
    expect(moved('svc_mcp_upstream_requests_total{method="other",outcome="rpc"}')).toBe(1);
    expect(moved('svc_mcp_upstream_requests_total{method="tools/list",outcome="ok"}')).toBe(1);
    expect(moved('svc_mcp_upstream_requests_total{method="tools/call",outcome="ok"}')).toBe(1);
    expect(moved('svc_mcp_upstream_request_duration_seconds_count{method="tools/call",outcome="ok"}')).toBe(
      1,
    );
    expect(moved('svc_decisions_total{decision="allow",mode="deterministic"}')).toBe(1);
  });
});
