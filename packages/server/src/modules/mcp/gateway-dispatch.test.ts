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
  lineageId: 'k1',
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
  /** What the record of each call would add to its reason (the pipeline appends the note). */
  const notes: (string | undefined)[] = [];
  let decide!: () => void;
  const decided = new Promise<void>((resolve) => {
    decide = resolve;
  });
  const enforcement: Pick<Enforcement, 'enforce'> = {
    enforce: (async (req: Parameters<Enforcement['enforce']>[0]) => {
      checked.push(req.call.toolName);
      await decided;
      const execution = await req.execute!();
      notes.push(execution.note);
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
  /** Notifications each session sent upstream, cancellations included. */
  const notified: string[] = [];
  let n = 0;
  const open = (): GatewaySession => {
    const created = sessions.create({ keyId: key.keyId, upstreamId: upstreamRow.id, organizationId: 'o1' });
    if (typeof created === 'string') throw new Error(created);
    created.upstream = {
      request: (method: string) => {
        sent.push(method);
        return { id: ++n, done: Promise.resolve({ content: [] }) };
      },
      abandon: (id: number) => notified.push(`abandon ${id}`),
      notify: (method: string) => notified.push(method),
      close: async () => {},
    } as unknown as UpstreamSession;
    return created;
  };
  const session = open();
  const other = open();
  const callerOf = (s: GatewaySession): Caller => ({
    key,
    upstream: upstreamRow,
    connectionId: s.id,
    sessionId: s.id,
    elapsed: () => 0,
  });
  const dispatch = (req: RpcRequest, on: GatewaySession = session) =>
    gateway.dispatch(callerOf(on), on, req, new PendingReply(false, on));
  /** The client's notifications/cancelled for `requestId`, on `on`. */
  const cancel = (requestId: unknown, on: GatewaySession = session) =>
    gateway.notify(on, {
      jsonrpc: '2.0',
      method: 'notifications/cancelled',
      params: { requestId, reason: 'changed my mind' },
    });
  return { dispatch, cancel, checked, sent, notes, notified, decide, session, other };
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

  it('does not forward a tools/call the client cancels at its policy check; the decision is still answered and recorded', async () => {
    const { dispatch, cancel, checked, sent, notes, notified, decide } = harness();
    const pending = dispatch(call(1));
    await new Promise((resolve) => setImmediate(resolve));
    expect(checked).toEqual(['echo']);
    cancel(1);
    decide();
    const answer = await pending;
    expect(answer).toMatchObject({
      id: 1,
      error: {
        code: -32603,
        message:
          'Not forwarded to upstream "u": cancelled by the client during its policy check: changed my mind',
        data: {
          tool: 'echo',
          decisionId: 'd1',
          reason: 'cancelled by the client during its policy check: changed my mind',
        },
      },
    });
    // The upstream saw nothing: no call, and no cancellation of a call it never got.
    expect(sent).toEqual([]);
    expect(notified).toEqual([]);
    // The record says it was not forwarded (never that an upstream call failed).
    expect(notes).toEqual([
      'not forwarded: cancelled by the client during its policy check: changed my mind',
    ]);
    // The id is free again, and a call with it goes through.
    expect(await dispatch(call(1))).toMatchObject({ id: 1, result: { content: [] } });
    expect(sent).toEqual(['tools/call']);
  });

  it('ignores a cancellation of an unknown id, of another session, or after the answer', async () => {
    const { dispatch, cancel, sent, notes, notified, decide, other } = harness();
    const pending = dispatch(call(1));
    await new Promise((resolve) => setImmediate(resolve));
    // Ids nothing in this session is using (2; "1" is not 1), an id that is not an id, and the same
    // id on another session of the same key.
    cancel(2);
    cancel('1');
    cancel({ id: 1 });
    cancel(1, other);
    decide();
    expect(await pending).toMatchObject({ id: 1, result: { content: [] } });
    expect(sent).toEqual(['tools/call']);
    // Answered: a late cancellation touches nothing, not the next request that reuses the id either.
    cancel(1);
    expect(await dispatch(call(1))).toMatchObject({ id: 1, result: { content: [] } });
    expect(sent).toEqual(['tools/call', 'tools/call']);
    expect(notes).toEqual([undefined, undefined]);
    expect(notified).toEqual([]);
  });
});
