import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, gate, keyHeader, type Tenant } from '../../../test/helpers.js';
import { storedReceipt } from '../../../test/ledger.js';
import {
  createUpstream,
  gatewayClient,
  putPolicy,
  rawRpc,
  rawSession,
  setTier,
} from '../../../test/mcp-helpers.js';
import { type McpUpstream, startMcpUpstream } from '../../../test/mcp-upstream.js';
import type { EnforceRequest } from '../../enforcement/model.js';
import { hashJson } from '../../ledger/canonical.js';

let streamable: McpUpstream;
let sse: McpUpstream;
const clients: Client[] = [];

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  streamable = await startMcpUpstream({ transport: 'streamable' });
  sse = await startMcpUpstream({ transport: 'sse' });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await streamable.close();
  await sse.close();
});

let n = 0;
async function setup(url: string, transport = 'mcp-streamable-http', extra: Record<string, unknown> = {}) {
  const tenant = await createTenant(t);
  const slug = `up-${++n}`;
  const upstream = await createUpstream(t, tenant, { name: slug, slug, transport, url, ...extra });
  return { tenant, slug, upstream };
}

async function connect(slug: string, tenant: Tenant) {
  const c = await gatewayClient(t.url, slug, tenant.apiKey);
  clients.push(c.client);
  return c;
}

async function decisionRow(id: string) {
  return t.store.db.selectFrom('decisions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
}

async function keyIdOf(tenant: Tenant): Promise<string> {
  const r = await t.store.db
    .selectFrom('api_keys')
    .select('id')
    .where('organization_id', '=', tenant.orgId)
    .executeTakeFirstOrThrow();
  return r.id;
}

/** The JSON-RPC error an SDK call rejected with. */
async function rpcFailure(p: Promise<unknown>): Promise<McpError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof McpError)) throw new Error(`expected a JSON-RPC error, got ${String(err)}`);
  return err;
}

describe.each([
  ['mcp-streamable-http', () => streamable],
  ['mcp-sse', () => sse],
] as const)('MCP gateway to a %s upstream', (transport, fixture) => {
  it('lets an unmodified SDK client list and call tools; the result comes back unchanged plus the receipt', async () => {
    const { tenant, slug, upstream } = await setup(fixture().url, transport);
    const { client, sessionId } = await connect(slug, tenant);
    // The upstream's own handshake answer.
    expect(client.getServerVersion()?.name).toBe('fixture-upstream');
    expect(client.getServerCapabilities()).toMatchObject({
      tools: expect.any(Object),
      resources: expect.any(Object),
    });
    const listed = await client.listTools();
    expect(listed.tools.map((x) => x.name).sort()).toEqual(['deep', 'echo', 'huge', 'pay', 'slow']);

    const result = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
    const upstreamResult = { content: [{ type: 'text', text: 'echo: hi' }], _meta: { upstream: 'fixture' } };
    const { veto_receipt: receipt, ...meta } = result._meta as Record<string, unknown>;
    expect({ ...result, _meta: meta }).toEqual(upstreamResult);
    expect(receipt).toEqual({
      receipt_id: expect.any(String),
      receipt_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      previous_receipt_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      merkle_root: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
    });

    const summary = receipt as { receipt_id: string };
    const row = await t.store.db
      .selectFrom('decisions')
      .selectAll()
      .where('receipt_id', '=', summary.receipt_id)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ decision: 'allow', tool_name: 'echo', organization_id: tenant.orgId });
    expect(JSON.parse(row.context)).toEqual({ session_id: sessionId, source: 'mcp', upstream: slug });
    expect(await storedReceipt(t, summary.receipt_id)).toMatchObject({
      decision: 'allow',
      result_hash: hashJson(upstreamResult),
      client_id: await keyIdOf(tenant),
      connection_id: sessionId,
      upstream_id: upstream.id,
    });
  });

  it('denies by policy with -32001, records the deny and never calls the upstream', async () => {
    const { tenant, slug } = await setup(fixture().url, transport);
    await putPolicy(t, tenant.orgId, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 100 }],
    });
    const { client } = await connect(slug, tenant);
    const before = fixture().calls.pay ?? 0;
    const err = await rpcFailure(client.callTool({ name: 'pay', arguments: { amount: 500 } }));
    expect(err.code).toBe(-32001);
    const data = err.data as { tool: string; reason: string; decisionId: string; receipt: unknown };
    expect(data).toMatchObject({ tool: 'pay', decisionId: expect.any(String) });
    expect(data.reason).toMatch(/amount/);
    expect(fixture().calls.pay ?? 0).toBe(before);
    const row = await decisionRow(data.decisionId);
    expect(row.decision).toBe('deny');
    expect(await storedReceipt(t, row.receipt_id)).not.toHaveProperty('result_hash');

    const ok = await client.callTool({ name: 'pay', arguments: { amount: 50 } });
    expect(ok.structuredContent).toEqual({ paid: 50 });
    expect(fixture().calls.pay).toBe(before + 1);
  });
});

describe('MCP gateway decisions', () => {
  it('answers require_approval with -32002 and the approval id; the approved call then goes through', async () => {
    const { tenant, slug } = await setup(streamable.url);
    await setTier(t, tenant.orgId, 'team');
    await putPolicy(t, tenant.orgId, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 100, action: 'require_approval' }],
    });
    const { client } = await connect(slug, tenant);
    const before = streamable.calls.pay ?? 0;
    const err = await rpcFailure(client.callTool({ name: 'pay', arguments: { amount: 500 } }));
    expect(err.code).toBe(-32002);
    const data = err.data as { tool: string; decisionId: string; approvalId: string };
    expect(data).toMatchObject({
      tool: 'pay',
      decisionId: expect.any(String),
      approvalId: expect.any(String),
    });
    expect(streamable.calls.pay ?? 0).toBe(before);

    const approval = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${data.approvalId}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(approval.json()).toMatchObject({ status: 'pending', toolName: 'pay' });
    // The key that asked cannot approve its own call; a person of the organization can.
    const selfApproved = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${data.approvalId}/resolve`,
      headers: keyHeader(tenant.apiKey),
      payload: { action: 'approve', resolvedBy: 'reviewer' },
    });
    expect(selfApproved.statusCode).toBe(403);
    const resolved = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${data.approvalId}/resolve`,
      headers: asUser(tenant),
      payload: { action: 'approve' },
    });
    expect(resolved.statusCode).toBe(200);
    const ok = await client.callTool({
      name: 'pay',
      arguments: { amount: 500 },
      _meta: { approval_id: data.approvalId },
    });
    expect(ok.structuredContent).toEqual({ paid: 500 });
    expect(streamable.calls.pay).toBe(before + 1);
  });

  it('applies session limits across the calls of one MCP session, and a new session starts afresh', async () => {
    const { tenant, slug } = await setup(streamable.url);
    await putPolicy(t, tenant.orgId, 'echo', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { maxCalls: 2 },
    });
    const first = await connect(slug, tenant);
    await first.client.callTool({ name: 'echo', arguments: { text: '1' } });
    await first.client.callTool({ name: 'echo', arguments: { text: '2' } });
    const err = await rpcFailure(first.client.callTool({ name: 'echo', arguments: { text: '3' } }));
    expect(err.code).toBe(-32001);
    expect((err.data as { reason: string }).reason).toMatch(/maxCalls|calls/i);
    const second = await connect(slug, tenant);
    expect(second.sessionId).not.toBe(first.sessionId);
    const ok = await second.client.callTool({ name: 'echo', arguments: { text: '1' } });
    expect(ok.content).toEqual([{ type: 'text', text: 'echo: 1' }]);
  });

  it('answers -32603 when the upstream is down, records such a call without a result hash; a lost upstream session ends the session', async () => {
    const down = await startMcpUpstream({ transport: 'streamable' });
    const port = down.port;
    await down.close();
    const { tenant, slug } = await setup(down.url);
    // No upstream session can be opened: initialize answers the failure and no session is kept.
    const before = await rpcFailure(connect(slug, tenant));
    expect(before.code).toBe(-32603);
    expect(before.message).toMatch(/failed/);
    const res = await fetch(`${t.url}/v1/mcp/${slug}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...keyHeader(tenant.apiKey) },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: 'echo', arguments: { text: 'x' } },
      }),
    });
    const err = (await res.json()) as { id: number; error: { code: number; data: { decisionId: string } } };
    expect(err.id).toBe(7);
    expect(err.error.code).toBe(-32603);
    const row = await decisionRow(err.error.data.decisionId);
    expect(row.decision).toBe('allow');
    expect(row.reason).toMatch(/upstream call failed/);
    expect(await storedReceipt(t, row.receipt_id)).not.toHaveProperty('result_hash');

    const back = await startMcpUpstream({ transport: 'streamable', port });
    try {
      const { client } = await connect(slug, tenant);
      const ok = await client.callTool({ name: 'echo', arguments: { text: 'again' } });
      expect(ok.content).toEqual([{ type: 'text', text: 'echo: again' }]);
      // The upstream restarted: its session is gone, so the call fails and the gateway session ends.
      await back.close();
      const restarted = await startMcpUpstream({ transport: 'streamable', port });
      try {
        const failed = await rpcFailure(client.callTool({ name: 'echo', arguments: { text: 'stale' } }));
        expect(failed.code).toBe(-32603);
        await expect(client.callTool({ name: 'echo', arguments: { text: 'gone' } })).rejects.toThrow(
          /MCP session .*not found/,
        );
        const { client: again } = await connect(slug, tenant);
        const renewed = await again.callTool({ name: 'echo', arguments: { text: 'renewed' } });
        expect(renewed.content).toEqual([{ type: 'text', text: 'echo: renewed' }]);
        await again.close();
      } finally {
        await restarted.close();
      }
    } finally {
      await back.close();
    }
  });

  it('fails calls in flight at once and ends the session when the event stream of an SSE upstream is lost', async () => {
    const dying = await startMcpUpstream({ transport: 'sse' });
    let down = false;
    try {
      const { tenant, slug } = await setup(dying.url, 'mcp-sse', { timeoutMs: 10_000 });
      const { client, sessionId } = await connect(slug, tenant);
      await client.callTool({ name: 'echo', arguments: { text: 'warm' } });
      const started = Date.now();
      const pending = rpcFailure(client.callTool({ name: 'slow', arguments: { ms: 8000 } }));
      await new Promise((r) => setTimeout(r, 300));
      await dying.close();
      down = true;
      const err = await pending;
      // Well within timeoutMs: the lost stream fails the call, rather than its timer.
      expect(Date.now() - started).toBeLessThan(3000);
      expect(err.code).toBe(-32603);
      const row = await decisionRow((err.data as { decisionId: string }).decisionId);
      expect(row.reason).toMatch(/upstream call failed: the upstream event stream was lost/);
      expect(await storedReceipt(t, row.receipt_id)).not.toHaveProperty('result_hash');
      // The session ended with its upstream session: its id is unknown now.
      const res = await fetch(`${t.url}/v1/mcp/${slug}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'mcp-session-id': sessionId,
          ...keyHeader(tenant.apiKey),
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
      });
      expect(res.status).toBe(404);
    } finally {
      if (!down) await dying.close();
    }
  });

  it("relays the client's cancellation upstream and records the call as failed", async () => {
    const { tenant, slug } = await setup(streamable.url);
    const { client } = await connect(slug, tenant);
    const aborter = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: 'slow', arguments: { ms: 10_000 } }, undefined, {
      signal: aborter.signal,
    });
    setTimeout(() => aborter.abort('changed my mind'), 300);
    await expect(pending).rejects.toThrow();
    let row: { reason: string } | undefined;
    while (!row && Date.now() - started < 5000) {
      row = await t.store.db
        .selectFrom('decisions')
        .select('reason')
        .where('organization_id', '=', tenant.orgId)
        .where('tool_name', '=', 'slow')
        .executeTakeFirst();
      if (!row) await new Promise((r) => setTimeout(r, 50));
    }
    // Recorded well before the tool's 10 s: the upstream was told and the gateway stopped waiting.
    expect(row?.reason).toMatch(/upstream call failed: cancelled by the client/);
    expect(Date.now() - started).toBeLessThan(5000);
    // The session goes on.
    const ok = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
    expect(ok.content).toEqual([{ type: 'text', text: 'echo: after' }]);
  });

  it('does not forward a call the client cancels at its policy check, and records the decision as not forwarded', async () => {
    const { tenant, slug } = await setup(streamable.url);
    await putPolicy(t, tenant.orgId, 'echo', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { maxCalls: 2 },
    });
    const url = `${t.url}/v1/mcp/${slug}`;
    const session = await rawSession(url, keyHeader(tenant.apiKey));
    // The first check of the tenant's echo waits (as an LLM judge or a slow store would) until let go.
    const policies = t.ctx.policies;
    const lookup = policies.get.bind(policies);
    const { opened: checking, open: atCheck } = gate();
    const { opened: held, open: letGo } = gate();
    let first = true;
    const spy = vi.spyOn(policies, 'get').mockImplementation(async (org, tool) => {
      if (first && org === tenant.orgId && tool === 'echo') {
        first = false;
        atCheck();
        await held;
      }
      return lookup(org, tool);
    });
    const before = streamable.calls.echo ?? 0;
    const callOf = (id: number, text: string) => ({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'echo', arguments: { text } },
    });
    try {
      const pending = rawRpc(url, callOf(7, 'never'), session);
      await checking;
      const cancelled = await rawRpc(
        url,
        {
          jsonrpc: '2.0',
          method: 'notifications/cancelled',
          params: { requestId: 7, reason: 'changed my mind' },
        },
        session,
      );
      expect(cancelled.status).toBe(202);
      letGo();
      const answer = (await pending).json();
      expect(answer).toMatchObject({
        id: 7,
        error: {
          code: -32603,
          message: `Not forwarded to upstream "${slug}": cancelled by the client during its policy check: changed my mind`,
          data: { tool: 'echo', decisionId: expect.any(String), receipt: expect.any(Object) },
        },
      });
      // The tool never ran.
      expect(streamable.calls.echo ?? 0).toBe(before);
      const row = await decisionRow(answer.error.data.decisionId);
      expect(row.decision).toBe('allow');
      expect(row.reason).toMatch(
        /; not forwarded: cancelled by the client during its policy check: changed my mind$/,
      );
      expect(row.reason).not.toMatch(/upstream call failed/);
      const receipt = await storedReceipt(t, answer.error.data.receipt.receipt_id);
      expect(receipt).toMatchObject({ decision: 'allow', connection_id: session['mcp-session-id'] });
      expect(receipt).not.toHaveProperty('result_hash');
      // Never sent, so it counts toward no session limit (nothing is left held either): both
      // calls maxCalls allows still run, and only the one after them is refused.
      const counted = await t.store.db
        .selectFrom('session_counters')
        .select('calls')
        .where('organization_id', '=', tenant.orgId)
        .where('session_id', '=', session['mcp-session-id']!)
        .executeTakeFirst();
      expect(counted?.calls ?? 0).toBe(0);
      for (const [i, text] of [
        [8, 'runs'],
        [9, 'runs too'],
      ] as const) {
        const ok = (await rawRpc(url, callOf(i, text), session)).json();
        expect(ok.result.content).toEqual([{ type: 'text', text: `echo: ${text}` }]);
      }
      expect(streamable.calls.echo).toBe(before + 2);
      expect((await rawRpc(url, callOf(10, 'over'), session)).json().error.code).toBe(-32001);
    } finally {
      spy.mockRestore();
    }
  });

  it('answers -32603 within timeoutMs, while other calls and other upstreams are not held up', async () => {
    const { tenant, slug } = await setup(streamable.url, 'mcp-streamable-http', { timeoutMs: 1500 });
    const other = await createUpstream(t, tenant, {
      name: 'other',
      slug: `other-${n}`,
      url: sse.url,
      transport: 'mcp-sse',
    });
    const { client } = await connect(slug, tenant);
    const { client: otherClient } = await connect(other.slug, tenant);
    await client.callTool({ name: 'echo', arguments: { text: 'warm' } });

    const started = Date.now();
    let slowDone = 0;
    const slow = rpcFailure(client.callTool({ name: 'slow', arguments: { ms: 10_000 } })).then((e) => {
      slowDone = Date.now();
      return e;
    });
    const [sameUpstream, otherUpstream] = await Promise.all([
      client.callTool({ name: 'echo', arguments: { text: 'fast' } }),
      otherClient.callTool({ name: 'echo', arguments: { text: 'fast' } }),
    ]);
    expect(slowDone).toBe(0);
    expect(sameUpstream.content).toEqual([{ type: 'text', text: 'echo: fast' }]);
    expect(otherUpstream.content).toEqual([{ type: 'text', text: 'echo: fast' }]);
    const err = await slow;
    const elapsed = Date.now() - started;
    expect(err.code).toBe(-32603);
    expect(err.message).toMatch(/1500 ms/);
    expect(elapsed).toBeGreaterThanOrEqual(1490);
    expect(elapsed).toBeLessThan(1500 + 2500);
    const row = await decisionRow((err.data as { decisionId: string }).decisionId);
    expect(row.reason).toMatch(/upstream call failed: no answer within 1500 ms/);
    // The timed-out connection was replaced; the next call works.
    const after = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
    expect(after.content).toEqual([{ type: 'text', text: 'echo: after' }]);
  });

  it('passes other methods through to the upstream unchanged', async () => {
    const { tenant, slug } = await setup(streamable.url);
    const { client } = await connect(slug, tenant);
    const resources = await client.listResources();
    expect(resources.resources.map((r) => r.uri)).toEqual(['fixture://greeting']);
    const read = await client.readResource({ uri: 'fixture://greeting' });
    expect(read.contents).toEqual([{ uri: 'fixture://greeting', text: 'hello from the fixture' }]);
    await client.ping();
    const err = await rpcFailure(client.getPrompt({ name: 'nope' }));
    // The upstream's own JSON-RPC error, not rewritten.
    expect(err.code).not.toBe(-32603);
  });

  it('sends the configured headers upstream', async () => {
    const guarded = await startMcpUpstream({ transport: 'streamable', requireToken: 's3cret' });
    try {
      const { tenant, slug } = await setup(guarded.url, 'mcp-streamable-http', {
        headers: { 'X-Upstream-Token': 's3cret' },
      });
      const { client } = await connect(slug, tenant);
      const ok = await client.callTool({ name: 'echo', arguments: { text: 'auth' } });
      expect(ok.content).toEqual([{ type: 'text', text: 'echo: auth' }]);
      expect(guarded.headers.every((h) => h['x-upstream-token'] === 's3cret')).toBe(true);
    } finally {
      await guarded.close();
    }
  });

  it('limits tools/call with the validation rate of the key', async () => {
    const { tenant, slug } = await setup(streamable.url);
    await setTier(t, tenant.orgId, 'enterprise', 2);
    const { client } = await connect(slug, tenant);
    await client.callTool({ name: 'echo', arguments: { text: '1' } });
    await client.callTool({ name: 'echo', arguments: { text: '2' } });
    // tools/list is not a checked call and is not counted.
    await client.listTools();
    const err = await client.callTool({ name: 'echo', arguments: { text: '3' } }).then(
      () => null,
      (e: Error) => e,
    );
    expect(String(err)).toMatch(/429|rate/i);
  });
});

describe('MCP gateway records', () => {
  it('records with the calling key in scope, and marks calls that reached the upstream as run', async () => {
    const { tenant, slug } = await setup(streamable.url);
    await putPolicy(t, tenant.orgId, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 100 }],
    });
    const seen: { keyId: unknown; ran: unknown; tool: string }[] = [];
    const original = t.ctx.enforcement.enforce;
    t.ctx.enforcement.enforce = async <T>(req: EnforceRequest<T>) => {
      const done = await original(req);
      seen.push({ keyId: req.scope.keyId, ran: done.ran, tool: req.call.toolName });
      return done;
    };
    try {
      const { client } = await connect(slug, tenant);
      await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
      await rpcFailure(client.callTool({ name: 'pay', arguments: { amount: 500 } }));
    } finally {
      t.ctx.enforcement.enforce = original;
    }
    const keyId = await keyIdOf(tenant);
    expect(seen).toEqual([
      { keyId, ran: true, tool: 'echo' },
      { keyId, ran: false, tool: 'pay' },
    ]);
  });
});
