import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyBaseLogger } from 'fastify';
import { callScopeOf, type Enforced, type ToolCall } from '../../enforcement/model.js';
import { type Enforcement, UnrecordedError } from '../../enforcement/pipeline.js';
import { hashJson } from '../../ledger/canonical.js';
import type { Clock } from '../../lib/clock.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../../lib/json.js';
import { compileSchema } from '../../lib/schemas.js';
import { storableText } from '../../lib/storable.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { ToolName } from '../tools/schemas.js';
import {
  isObject,
  type Params,
  RPC,
  type RpcId,
  type RpcRequest,
  type RpcResponse,
  rpcError,
  rpcResult,
} from './jsonrpc.js';
import type { FeedEvent, UpstreamLimits } from './model.js';
import type { PendingReply } from './reply.js';
import type { UpstreamRow } from './repository.js';
import { toTarget } from './service.js';
import type { GatewaySession, McpSessions, StatelessRequest } from './sessions.js';
import { GATEWAY_CLIENT_INFO, type OpenOptions, toUpstreamError, UpstreamError } from './upstream-client.js';
import { UpstreamSession } from './upstream-session.js';

export const GATEWAY_VERSION = '0.1.0';

/**
 * A request ended before it was sent upstream: the client cancelled it (a tools/call at its policy
 * check), or its API key was revoked (a session-less request). It is not sent, so the upstream
 * never saw it.
 */
class NotForwarded extends UpstreamError {
  constructor(message: string, kind: 'cancelled' | 'refused' = 'cancelled') {
    super(kind, message);
  }
}

const cancelledAtCheck = (why: string) =>
  new NotForwarded(`cancelled by the client during its policy check: ${why}`);

/** validate's own tool_name schema, so both entry points refuse the same names. */
const toolNameCheck = compileSchema(ToolName);
const isToolName = (name: string): boolean => toolNameCheck.Check(name);

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
  /** A session-less request: ended (not sent, or failed if sent) when its key is revoked meanwhile. */
  stateless?: StatelessRequest | null;
}

export interface GatewayDeps {
  enforcement: Pick<Enforcement, 'enforce'>;
  sessions: McpSessions;
  open: OpenOptions;
  limits: UpstreamLimits;
  clock: Clock;
  log: FastifyBaseLogger;
}

/** A client notification or response, as received. */
export interface ClientMessage {
  jsonrpc: '2.0';
  id?: RpcId;
  method?: string;
  params?: Params;
  result?: unknown;
  error?: unknown;
}

/** What a session-less request declares upstream: nothing, since it has no channel for server requests. */
const STATELESS_INITIALIZE: Params = {
  protocolVersion: LATEST_PROTOCOL_VERSION,
  capabilities: {},
  clientInfo: GATEWAY_CLIENT_INFO,
};

/**
 * The upstream's failure as the client sees it: its own JSON-RPC error unchanged, else -32603.
 * `decision` (a tool call's record: tool, reason, decisionId, receipt) goes into the error's data:
 * for the upstream's own error, whose data the client may need as it is (a -32042 carries the URL
 * elicitations to complete), the upstream's data object stays whole and the receipt is added under
 * its `_meta` (`veto_receipt`, `veto_decision`), as in a result; data that is not an object is left
 * alone (the decision is in the log and on the session's stream).
 */
function upstreamFailure(
  id: RpcId,
  slug: string,
  e: UpstreamError,
  decision?: { tool: string; reason: string; decisionId: string; receipt: unknown },
): RpcResponse {
  if (e.rpc) {
    const data = e.rpc.data;
    if (!decision || (data !== undefined && !isObject(data)))
      return rpcError(id, e.rpc.code, e.rpc.message, data);
    const { receipt, ...rest } = decision;
    const own = data ?? {};
    const meta = isObject(own._meta) ? own._meta : {};
    return rpcError(id, e.rpc.code, e.rpc.message, {
      ...own,
      _meta: { ...meta, veto_receipt: receipt, veto_decision: rest },
    });
  }
  return rpcError(id, RPC.internal, `Upstream "${slug}" failed: ${e.message}`, decision);
}

export function createGateway({ enforcement, sessions, open, limits, clock, log }: GatewayDeps) {
  /**
   * Opens the session's upstream session with the client's own initialize (capabilities, protocol
   * version, clientInfo) and answers with the upstream's InitializeResult unchanged.
   */
  async function initialize(caller: Caller, session: GatewaySession, req: RpcRequest): Promise<RpcResponse> {
    try {
      const {
        session: upstream,
        result,
        version,
      } = await UpstreamSession.open(toTarget(caller.upstream), open, limits, req.params ?? {}, {
        // A request the client cannot take (too many wait for it) ends the upstream session.
        message: (m) => session.deliver(m),
        closed: (why) => void sessions.end(session.id, `the upstream session ended (${why})`),
      });
      if (session.closed) {
        void upstream.close();
        return rpcError(req.id, RPC.internal, 'The MCP session ended during initialize');
      }
      session.upstream = upstream;
      session.protocolVersion = version;
      return rpcResult(req.id, result);
    } catch (err) {
      void sessions.end(session.id, 'initialize failed');
      log.warn({ err, upstream: caller.upstream.slug }, 'MCP upstream initialize failed');
      return upstreamFailure(req.id, caller.upstream.slug, toUpstreamError(err));
    }
  }

  /** Sends a request upstream in the caller's session, or (session-less) in a session of its own. */
  async function forward(
    session: GatewaySession | null,
    caller: Caller,
    req: RpcRequest,
    params: Params | undefined,
  ): Promise<Record<string, unknown>> {
    if (session) {
      // The request is in flight in the session since dispatch took its id.
      const upstream = session.upstream;
      if (!upstream) throw new UpstreamError('unreachable', 'the session has no upstream session');
      const cancelled = session.cancelledUnsent(req.id);
      if (cancelled !== null) throw cancelledAtCheck(cancelled);
      const sent = upstream.request(req.method, params);
      session.sentAs(req.id, sent.id);
      return await sent.done;
    }
    const release = sessions.slot(caller.upstream.id);
    if (!release) {
      throw new UpstreamError(
        'refused',
        `the upstream has its maximum of ${sessions.limits.perUpstream} sessions open; retry later`,
      );
    }
    let upstream: UpstreamSession | null = null;
    const request = caller.stateless ?? null;
    try {
      if (request?.ended) throw new NotForwarded(request.ended, 'refused');
      const opened = await UpstreamSession.open(
        toTarget(caller.upstream),
        { ...open, standaloneStream: false },
        limits,
        STATELESS_INITIALIZE,
        {
          // No client channel: requests are refused (the refusals wait to be sent within the bound
          // of waiting requests), notifications have nowhere to go.
          message: (m, from) => {
            if (m.id !== undefined)
              from.respond({
                jsonrpc: '2.0',
                id: m.id,
                error: { code: RPC.methodNotFound, message: 'The client has no session for server requests' },
              });
            return true;
          },
          closed: () => {},
        },
      );
      upstream = opened.session;
      // Ended while its upstream session opened: the request is not sent.
      if (request && !request.attach(upstream)) throw new NotForwarded(request.ended!, 'refused');
      upstream.notify('notifications/initialized', undefined);
      return await upstream.request(req.method, params).done;
    } finally {
      if (upstream) void upstream.close().finally(release);
      else release();
    }
  }

  /**
   * The one place the gateway meets the policy: the enforcement pipeline decides on the call, runs
   * it upstream only if allowed, and records what happened (the receipt binds the result, or the
   * reason says the call failed). Whatever `run` does, the answer is a JSON-RPC message with `id`.
   */
  async function enforced(
    caller: Caller,
    id: RpcId,
    call: ToolCall,
    run: () => Promise<Record<string, unknown>>,
  ): Promise<RpcResponse> {
    const { key, upstream } = caller;
    const tool = call.toolName;
    type Upstream = { ok: true; result: Record<string, unknown> } | { ok: false; error: UpstreamError };
    let done: Enforced<Upstream>;
    try {
      done = await enforcement.enforce<Upstream>({
        scope: callScopeOf(key),
        call,
        source: 'server',
        elapsed: caller.elapsed,
        bindings: { client_id: key.keyId, connection_id: caller.connectionId, upstream_id: upstream.id },
        // Never throws: a failed call is still an allowed decision, recorded with the failure in its
        // reason and no result_hash; it may have reached the tool, so it counts as run (one never
        // sent does not).
        execute: async () => {
          try {
            const result = await run();
            let resultHash: string;
            try {
              resultHash = hashJson(result);
            } catch (err) {
              throw new UpstreamError(
                'invalid',
                `its result cannot be bound into a receipt: ${(err as Error).message}`,
              );
            }
            return { value: { ok: true, result }, resultHash };
          } catch (err) {
            const error = toUpstreamError(err);
            // The upstream's (or the client's) words go into the record as text every store can hold.
            if (error instanceof NotForwarded) {
              // Never sent: it ran nowhere, so it counts toward no session limit and uses no approval.
              return {
                value: { ok: false, error },
                note: `not forwarded: ${storableText(error.message)}`,
                ran: false as const,
              };
            }
            return {
              value: { ok: false, error },
              note: `upstream call failed: ${storableText(error.message)}`,
            };
          }
        },
      });
    } catch (err) {
      if (err instanceof UnrecordedError) {
        log.error({ err: err.cause }, 'MCP gateway decision could not be recorded');
        return rpcError(
          id,
          RPC.internal,
          err.ran
            ? 'Internal gateway error: the tool ran upstream but its decision could not be recorded durably, so its result is withheld'
            : 'Internal gateway error: the decision could not be recorded durably; retry the call',
          { tool },
        );
      }
      log.error({ err }, 'MCP gateway could not decide a tool call');
      return rpcError(id, RPC.internal, 'Internal gateway error: the call could not be checked; retry', {
        tool,
      });
    }
    // After the answer is written: the client waits for its answer, not for its watchers' event.
    const event: FeedEvent = {
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
    };
    setImmediate(() => sessions.publish(event));
    const data = { tool, reason: done.reason, decisionId: done.decisionId, receipt: done.receipt };
    if (done.decision === 'deny')
      return rpcError(id, RPC.policyDenied, `Denied by policy: ${done.reason}`, data);
    if (done.decision === 'require_approval') {
      return rpcError(id, RPC.approvalRequired, `Human approval required: ${done.reason}`, {
        ...data,
        approvalId: done.approvalId ?? null,
      });
    }
    const answer = done.execution!.value;
    if (!answer.ok) {
      const { error } = answer;
      const decision = { ...data, reason: error.message };
      // Not sent, so there is no upstream failure to relay: the answer says what the record says.
      if (error instanceof NotForwarded)
        return rpcError(
          id,
          RPC.internal,
          `Not forwarded to upstream "${upstream.slug}": ${error.message}`,
          decision,
        );
      return upstreamFailure(id, upstream.slug, error, decision);
    }
    const meta = isObject(answer.result._meta) ? answer.result._meta : {};
    return rpcResult(id, { ...answer.result, _meta: { ...meta, veto_receipt: done.receipt } });
  }

  /** tools/call: checked like POST /v1/tools/validate, then forwarded with the client's params as sent. */
  function callTool(caller: Caller, session: GatewaySession | null, req: RpcRequest): Promise<RpcResponse> {
    const p = req.params;
    if (
      !p ||
      typeof p.name !== 'string' ||
      p.name === '' ||
      (p.arguments !== undefined && !isObject(p.arguments))
    ) {
      return Promise.resolve(
        rpcError(
          req.id,
          RPC.invalidRequest,
          'Invalid Request: tools/call needs params.name (string) and params.arguments (object)',
        ),
      );
    }
    // The same tool names as validate: a name no policy, tool or log entry can hold is not called.
    if (!isToolName(p.name)) {
      return Promise.resolve(
        rpcError(
          req.id,
          RPC.invalidRequest,
          'Invalid Request: params.name must be 1-200 characters without control characters (U+0000-U+001F)',
        ),
      );
    }
    // Same bound as validate: deeper data cannot be canonicalized into a receipt.
    if (nestedDeeperThan(p.arguments, MAX_JSON_DEPTH)) {
      return Promise.resolve(
        rpcError(
          req.id,
          RPC.invalidRequest,
          `Invalid Request: params.arguments is nested deeper than ${MAX_JSON_DEPTH} levels`,
        ),
      );
    }
    const meta = isObject(p._meta) ? p._meta : {};
    const call: ToolCall = {
      toolName: p.name,
      arguments: (p.arguments as Record<string, unknown> | undefined) ?? {},
      context: {
        ...(caller.sessionId !== null ? { session_id: caller.sessionId } : {}),
        source: 'mcp',
        upstream: caller.upstream.slug,
        // A call retried after a human approved it names the approval, as validate's context does.
        ...(typeof meta.approval_id === 'string' ? { approval_id: meta.approval_id } : {}),
      },
    };
    return enforced(caller, req.id, call, () => forward(session, caller, req, p));
  }

  async function passThrough(
    caller: Caller,
    session: GatewaySession | null,
    req: RpcRequest,
  ): Promise<RpcResponse> {
    try {
      return rpcResult(req.id, await forward(session, caller, req, req.params));
    } catch (err) {
      return upstreamFailure(req.id, caller.upstream.slug, toUpstreamError(err));
    }
  }

  return {
    initialize,

    /** Any request but initialize. Always answers with a JSON-RPC message carrying the request's id. */
    async dispatch(
      caller: Caller,
      session: GatewaySession | null,
      req: RpcRequest,
      reply: PendingReply,
    ): Promise<RpcResponse> {
      if (req.method === 'ping') return rpcResult(req.id, {});
      // The id is taken before anything else, policy check included: a second request with an id
      // still in flight is refused at once, however soon after the first it comes, with nothing
      // recorded or forwarded.
      if (session) {
        const meta = isObject(req.params?._meta) ? req.params._meta : {};
        if (!session.begin(req.id, reply, meta.progressToken))
          return rpcError(req.id, RPC.invalidRequest, 'Invalid Request: a request with this id is in flight');
      }
      try {
        if (req.method === 'tools/call') return await callTool(caller, session, req);
        return await passThrough(caller, session, req);
      } catch (err) {
        log.error({ err }, 'MCP gateway request failed');
        return rpcError(req.id, RPC.internal, 'Internal gateway error');
      } finally {
        session?.end(req.id);
      }
    },

    /**
     * A client notification: forwarded to its upstream session (a cancellation names the upstream's
     * id). A cancellation of a request not sent upstream yet (a tools/call at its policy check)
     * keeps it from being sent; one naming no request of the session in flight does nothing.
     */
    notify(session: GatewaySession | null, msg: ClientMessage): void {
      const upstream = session?.upstream;
      if (!session || !upstream || typeof msg.method !== 'string') return;
      if (msg.method === 'notifications/cancelled') {
        const rid = msg.params?.requestId;
        if (typeof rid !== 'string' && typeof rid !== 'number') return;
        const why = typeof msg.params?.reason === 'string' ? msg.params.reason : 'no reason given';
        const upId = session.upstreamIdOf(rid);
        if (upId === null) session.cancelUnsent(rid, why);
        else upstream.abandon(upId, new UpstreamError('cancelled', `cancelled by the client: ${why}`));
        return;
      }
      upstream.notify(msg.method, msg.params);
    },

    /** A client's answer to an upstream request of its session; anything else is dropped. */
    respond(session: GatewaySession | null, msg: ClientMessage): void {
      const upstream = session?.upstream;
      if (!session || !upstream || msg.id === undefined || !session.answers(msg.id)) return;
      upstream.respond(msg as never);
    },
  };
}

export type Gateway = ReturnType<typeof createGateway>;
