import type { FastifyBaseLogger } from 'fastify';
import { callScopeOf, type Enforced, type ToolCall } from '../../enforcement/model.js';
import { type Enforcement, UnrecordedError } from '../../enforcement/pipeline.js';
import { hashJson } from '../../ledger/canonical.js';
import type { Clock } from '../../lib/clock.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../../lib/json.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import {
  isObject,
  negotiateVersion,
  type Params,
  RPC,
  type RpcRequest,
  type RpcResponse,
  rpcError,
  rpcResult,
} from './jsonrpc.js';
import type { UpstreamPool } from './pool.js';
import type { UpstreamRow } from './repository.js';
import { toTarget } from './service.js';
import type { McpSessions } from './sessions.js';
import { toUpstreamError, type UpstreamError } from './upstream-client.js';

export const GATEWAY_VERSION = '0.1.0';

/** One JSON-RPC request through the gateway: who sent it, to which upstream, in which MCP session. */
export interface Caller {
  key: KeyPrincipal;
  upstream: UpstreamRow;
  /** The MCP session id, or a fresh id per request for session-less (stateless) use: the receipt's connection_id. */
  connectionId: string;
  /**
   * The MCP session, or null for a session-less call. Only a real session is a policy session
   * (context.session_id): a session-less call is checked like POST /v1/tools/validate without one.
   */
  sessionId: string | null;
  /** Milliseconds since the request arrived (reply.elapsedTime). */
  elapsed: () => number;
}

export interface GatewayDeps {
  enforcement: Pick<Enforcement, 'enforce'>;
  pool: UpstreamPool;
  sessions: McpSessions;
  clock: Clock;
  log: FastifyBaseLogger;
}

/** Requests forwarded to the upstream as they are. Anything else (sampling, logging/setLevel, subscriptions…) is refused. */
export const PASS_THROUGH_METHODS: ReadonlySet<string> = new Set([
  'tools/list',
  'resources/list',
  'resources/read',
  'resources/templates/list',
  'prompts/list',
  'prompts/get',
  'completion/complete',
]);

/** Forwarded params: the client's progress token is dropped, since progress notifications are not relayed. */
function forwardParams(params: Params | undefined): Params | undefined {
  if (!params || !isObject(params._meta) || !('progressToken' in params._meta)) return params;
  const { progressToken: _, ...meta } = params._meta;
  return { ...params, _meta: meta };
}

/** What the upstream's failure looks like to the client: always -32603, the upstream's own error in data. */
function upstreamFailure(
  id: RpcRequest['id'],
  slug: string,
  e: UpstreamError,
  data: Record<string, unknown> = {},
): RpcResponse {
  return rpcError(id, RPC.internal, `Upstream "${slug}" failed: ${e.message}`, {
    ...data,
    ...(e.rpc ? { upstreamError: e.rpc } : {}),
  });
}

export function createGateway({ enforcement, pool, sessions, clock, log }: GatewayDeps) {
  /** The gateway's own handshake; it mirrors the upstream's resources/prompts/completions when reachable. */
  async function initialize(caller: Caller, req: RpcRequest): Promise<RpcResponse> {
    const capabilities: Record<string, unknown> = { tools: {} };
    let instructions: string | undefined;
    try {
      const info = await pool.info(toTarget(caller.upstream));
      // Only request/response features: upstream notifications (list_changed, subscribe) are not relayed.
      for (const k of ['resources', 'prompts', 'completions'] as const)
        if (info.capabilities?.[k]) capabilities[k] = {};
      instructions = info.instructions;
    } catch (err) {
      log.warn({ err, upstream: caller.upstream.slug }, 'MCP upstream unreachable during initialize');
    }
    return rpcResult(req.id, {
      protocolVersion: negotiateVersion(req.params),
      capabilities,
      serverInfo: { name: `svc-gateway/${caller.upstream.slug}`, version: GATEWAY_VERSION },
      ...(instructions ? { instructions } : {}),
    });
  }

  async function passThrough(caller: Caller, req: RpcRequest): Promise<RpcResponse> {
    try {
      return rpcResult(
        req.id,
        await pool.request(toTarget(caller.upstream), req.method, forwardParams(req.params)),
      );
    } catch (err) {
      const e = toUpstreamError(err);
      // Outside tools/call the gateway is transparent: the upstream's own JSON-RPC errors pass unchanged.
      if (e.rpc) return rpcError(req.id, e.rpc.code, e.rpc.message, e.rpc.data);
      return upstreamFailure(req.id, caller.upstream.slug, e);
    }
  }

  /**
   * tools/call: enforced by the same pipeline as POST /v1/tools/validate, which forwards only an
   * allowed call and records after the upstream answered so the receipt binds the result it produced.
   */
  async function callTool(caller: Caller, req: RpcRequest): Promise<RpcResponse> {
    const p = req.params;
    if (
      !p ||
      typeof p.name !== 'string' ||
      p.name === '' ||
      (p.arguments !== undefined && !isObject(p.arguments))
    ) {
      return rpcError(
        req.id,
        RPC.invalidRequest,
        'Invalid Request: tools/call needs params.name (string) and params.arguments (object)',
      );
    }
    // Same bound as validate: deeper data cannot be canonicalized into a receipt.
    if (nestedDeeperThan(p.arguments, MAX_JSON_DEPTH)) {
      return rpcError(
        req.id,
        RPC.invalidRequest,
        `Invalid Request: params.arguments is nested deeper than ${MAX_JSON_DEPTH} levels`,
      );
    }
    const { key, upstream } = caller;
    const meta = isObject(p._meta) ? p._meta : {};
    const call: ToolCall = {
      toolName: p.name,
      arguments: (p.arguments as Record<string, unknown> | undefined) ?? {},
      context: {
        ...(caller.sessionId !== null ? { session_id: caller.sessionId } : {}),
        source: 'mcp',
        upstream: upstream.slug,
        // A call retried after a human approved it names the approval, as validate's context does.
        ...(typeof meta.approval_id === 'string' ? { approval_id: meta.approval_id } : {}),
      },
    };
    const tool = call.toolName;
    // The upstream is called only for an allowed call, by the pipeline, before it records the
    // decision: the receipt binds the result. A failed call is still an allowed decision, recorded
    // with the failure in its reason and no result_hash; it may have reached the tool, so it counts as run.
    type Upstream = { ok: true; result: Record<string, unknown> } | { ok: false; error: UpstreamError };
    let done: Enforced<Upstream>;
    try {
      done = await enforcement.enforce<Upstream>({
        scope: callScopeOf(key),
        call,
        source: 'server',
        elapsed: caller.elapsed,
        bindings: { client_id: key.keyId, connection_id: caller.connectionId, upstream_id: upstream.id },
        execute: async () => {
          try {
            const result = await pool.request(toTarget(upstream), 'tools/call', forwardParams(p));
            return { value: { ok: true, result }, resultHash: hashJson(result) };
          } catch (err) {
            const error = toUpstreamError(err);
            return { value: { ok: false, error }, note: `upstream call failed: ${error.message}` };
          }
        },
      });
    } catch (err) {
      if (err instanceof UnrecordedError) {
        log.error({ err: err.cause }, 'MCP gateway decision could not be recorded');
        return rpcError(
          req.id,
          RPC.internal,
          err.ran
            ? 'Internal gateway error: the tool ran upstream but its decision could not be recorded durably, so its result is withheld'
            : 'Internal gateway error: the decision could not be recorded durably; retry the call',
          { tool },
        );
      }
      log.error({ err }, 'MCP gateway could not decide a tool call');
      return rpcError(req.id, RPC.internal, 'Internal gateway error: the call could not be checked; retry', {
        tool,
      });
    }
    sessions.publish({
      keyId: key.keyId,
      upstreamId: upstream.id,
      sessionId: caller.connectionId,
      envelope: {
        type: 'decision',
        decisionId: done.decisionId,
        sessionId: caller.connectionId,
        upstream: upstream.slug,
        toolName: tool,
        decision: done.decision,
        reason: done.reason,
        mode: done.mode,
        latencyMs: done.latencyMs,
        receipt: done.receipt,
        ...(done.approvalId ? { approvalId: done.approvalId } : {}),
        createdAt: clock.now().toISOString(),
      },
    });
    const data = { tool, reason: done.reason, decisionId: done.decisionId, receipt: done.receipt };
    if (done.decision === 'deny') {
      return rpcError(req.id, RPC.policyDenied, `Denied by policy: ${done.reason}`, data);
    }
    if (done.decision === 'require_approval') {
      return rpcError(req.id, RPC.approvalRequired, `Human approval required: ${done.reason}`, {
        ...data,
        approvalId: done.approvalId ?? null,
      });
    }
    const upstreamAnswer = done.execution!.value;
    if (!upstreamAnswer.ok) {
      const e = upstreamAnswer.error;
      return upstreamFailure(req.id, upstream.slug, e, { ...data, reason: e.message });
    }
    const result = upstreamAnswer.result;
    const meta0 = isObject(result._meta) ? result._meta : {};
    return rpcResult(req.id, { ...result, _meta: { ...meta0, veto_receipt: done.receipt } });
  }

  return {
    initialize,
    async dispatch(caller: Caller, req: RpcRequest): Promise<RpcResponse> {
      switch (req.method) {
        case 'ping':
          return rpcResult(req.id, {});
        case 'tools/call':
          return callTool(caller, req);
        default:
          if (PASS_THROUGH_METHODS.has(req.method)) return passThrough(caller, req);
          return rpcError(req.id, RPC.methodNotFound, `Method not found: ${req.method}`);
      }
    },
  };
}

export type Gateway = ReturnType<typeof createGateway>;
