import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import type { PolicyDefinition } from '@svc/policy-engine';
import { createPolicyRepository } from '../src/modules/policies/repository.js';
import { ADMIN_TOKEN, keyHeader, type Tenant, type TestApp } from './helpers.js';

/** Writes a policy straight to the store and drops the cached copy (as the validation tests do). */
export async function putPolicy(
  t: TestApp,
  orgId: string,
  toolName: string,
  def: PolicyDefinition,
): Promise<void> {
  const now = new Date().toISOString();
  const repo = createPolicyRepository(t.store.db);
  await repo.delete(orgId, toolName);
  await repo.insert({
    organization_id: orgId,
    tool_name: toolName,
    project_id: null,
    version: 1,
    is_active: 1,
    mode: def.mode,
    constraints: JSON.stringify(def.constraints ?? []),
    session_constraints: def.sessionConstraints ? JSON.stringify(def.sessionConstraints) : null,
    llm_config: def.llmConfig ? JSON.stringify(def.llmConfig) : null,
    created_at: now,
    updated_at: now,
  });
  t.ctx.policies.invalidate(orgId, toolName);
}

export async function setTier(
  t: TestApp,
  orgId: string,
  tier: string,
  rateLimitPerMinute?: number,
): Promise<void> {
  const res = await t.inject({
    method: 'PATCH',
    url: `/v1/admin/organizations/${orgId}`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { tier, ...(rateLimitPerMinute !== undefined ? { rateLimitPerMinute } : {}) },
  });
  if (res.statusCode !== 200) throw new Error(`tier change failed: ${res.body}`);
  // Cached principals carry the tier.
  t.ctx.keys.forgetOrganization(orgId);
}

export async function createUpstream(t: TestApp, tenant: Tenant, body: Record<string, unknown>) {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/mcp/upstreams',
    headers: keyHeader(tenant.apiKey),
    payload: body,
  });
  if (res.statusCode !== 201) throw new Error(`upstream create failed: ${res.statusCode} ${res.body}`);
  return res.json() as { id: string; slug: string };
}

/** An unmodified SDK client through the gateway, the API key in its request headers. */
export async function gatewayClient(
  base: string,
  slug: string,
  apiKey: string,
): Promise<{ client: Client; sessionId: string }> {
  const client = new Client({ name: 'test-client', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/v1/mcp/${slug}`), {
    requestInit: { headers: { 'x-service-api-key': apiKey } },
  });
  await client.connect(transport);
  return { client, sessionId: transport.sessionId! };
}

export interface RawAnswer {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field
  json: () => any;
}

/** A bare HTTP POST of one JSON-RPC body (no SDK): what a minimal client or curl sends. */
export async function rawRpc(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) };
}

/**
 * A gateway session opened with bare requests (initialize, then notifications/initialized): the
 * headers of its later requests, `headers` and its Mcp-Session-Id.
 */
export async function rawSession(
  url: string,
  headers: Record<string, string>,
  clientName = 'raw',
): Promise<Record<string, string>> {
  const init = await rawRpc(
    url,
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: {
        protocolVersion: LATEST_PROTOCOL_VERSION,
        capabilities: {},
        clientInfo: { name: clientName, version: '1' },
      },
    },
    headers,
  );
  const session = { ...headers, 'mcp-session-id': init.headers.get('mcp-session-id')! };
  await rawRpc(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session);
  return session;
}

/** Reads SSE events from a response body until `until` is satisfied or the deadline passes. */
export async function readEvents(
  res: Response,
  until: (events: { event: string; data: string }[]) => boolean,
  timeoutMs = 5000,
): Promise<{ event: string; data: string }[]> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const events: { event: string; data: string }[] = [];
  let buffer = '';
  const deadline = Date.now() + timeoutMs;
  try {
    while (!until(events)) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`events not seen in time; got ${JSON.stringify(events)}`);
      const chunk = await Promise.race([
        reader.read(),
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error('stream read timed out')), left)),
      ]);
      if (chunk.done) break;
      buffer += chunk.value;
      let cut = buffer.indexOf('\n\n');
      while (cut >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const lines = block.split('\n').filter((l) => !l.startsWith(':'));
        if (lines.length > 0) {
          const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? 'message';
          const data = lines
            .filter((l) => l.startsWith('data: '))
            .map((l) => l.slice(6))
            .join('\n');
          events.push({ event, data });
        }
        cut = buffer.indexOf('\n\n');
      }
    }
  } finally {
    void reader.cancel().catch(() => {});
  }
  return events;
}
