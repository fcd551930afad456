import type { FastifyBaseLogger } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { Enforcement } from '../../enforcement/pipeline.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { type Caller, createGateway } from './gateway.js';
import type { RpcRequest } from './jsonrpc.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { PendingReply } from './reply.js';
import type { UpstreamRow } from './repository.js';
import { type GatewaySession, McpSessions } from './sessions.js';
import type { UpstreamSession } from './upstream-session.js';

const key: KeyPrincipal = {
  kind: 'apiKey',
  keyId: 'k1',
  organizationId: 'o1',
  projectId: null,
  tier: 'team',
  rateLimitPerMinute: null,
  scopes: [],
};
const upstreamRow: UpstreamRow = {
  id: 'u1',
  organization_id: 'o1',
  project_id: null,
  name: 'u',
  slug: 'u',
  transport: 'mcp-streamable-http',
  url: 'http://127.0.0.1:1/mcp',
  headers: '{}',
  timeout_ms: 1000,
  enabled: 1,
  created_at: '',
  updated_at: '',
};

const noop = () => {};
const silent = { error: noop, warn: noop, info: noop } as unknown as FastifyBaseLogger;

const all: McpSessions[] = [];
afterEach(async () => {
  for (const s of all.splice(0)) await s.close();
});

/**
 * A gateway whose policy check waits until `decide` is called, on a session whose upstream session
 * answers every request at once: what reaches the check and the upstream is counted.
 */
function harness() {
  const sessions = new McpSessions();
  all.push(sessions);
  const checked: string[] = [];
  const sent: string[] = [];
  let decide!: () => void;
  const decided = new Promise<void>((resolve) => {
    decide = resolve;
  });
  const enforcement: Pick<Enforcement, 'enforce'> = {
    enforce: (async (req: Parameters<Enforcement['enforce']>[0]) => {
      checked.push(req.call.toolName);
      await decided;
      const execution = await req.execute!();
      return {
        decision: 'allow',
        reason: 'allowed',
        failedConstraints: [],
        mode: 'deterministic',
        policyVersion: null,
        latencyMs: 0,
        decisionId: `d${checked.length}`,
        receipt: {},
        approvalId: null,
        ran: true,
        execution,
      };
    }) as unknown as Enforcement['enforce'],
  };
  const gateway = createGateway({
    enforcement,
    sessions,
    open: { allowPrivate: true },
    limits: DEFAULT_UPSTREAM_LIMITS,
    clock: { now: () => new Date() },
    log: silent,
  });
  const created = sessions.create({ keyId: key.keyId, upstreamId: upstreamRow.id, organizationId: 'o1' });
  if (typeof created === 'string') throw new Error(created);
  const session: GatewaySession = created;
  let n = 0;
  session.upstream = {
    request: (method: string) => {
      sent.push(method);
      return { id: ++n, done: Promise.resolve({ content: [] }) };
    },
    close: async () => {},
  } as unknown as UpstreamSession;
  const caller: Caller = {
    key,
    upstream: upstreamRow,
    connectionId: session.id,
    sessionId: session.id,
    elapsed: () => 0,
  };
  const dispatch = (req: RpcRequest) =>
    gateway.dispatch(caller, session, req, new PendingReply(false, session));
  return { dispatch, checked, sent, decide };
}

const call = (id: number): RpcRequest => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'echo', arguments: { text: 'x' } },
});

describe('MCP gateway dispatch', () => {
  it('refuses a tools/call whose id is in flight while the first is still being checked, checking and recording nothing', async () => {
    const { dispatch, checked, sent, decide } = harness();
    const first = dispatch(call(1));
    // The first call is at the policy check; the second, with the same id, comes now.
    const second = dispatch(call(1));
    await new Promise((resolve) => setImmediate(resolve));
    expect(checked).toEqual(['echo']);
    decide();
    expect(await second).toMatchObject({ id: 1, error: { code: -32600 } });
    expect(await first).toMatchObject({ id: 1, result: { content: [] } });
    expect(sent).toEqual(['tools/call']);
    // Answered, the id is free again.
    expect(await dispatch(call(1))).toMatchObject({ id: 1, result: { content: [] } });
  });
});
