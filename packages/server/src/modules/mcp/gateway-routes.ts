import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { presentedKey } from '../../events/access.js';
import { AppError, notFound } from '../../lib/errors.js';
import { applyRateLimit } from '../../plugins/rate-limit.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import type { UpstreamDirectory } from './directory.js';
import type { Gateway } from './gateway.js';
import {
  acceptsSse,
  classify,
  RPC,
  type RpcResponse,
  rpcError,
  sendRpc,
  useRpcBodyParser,
  wantsSse,
} from './jsonrpc.js';
import { PendingReply } from './reply.js';
import type { UpstreamRow } from './repository.js';
import { GatewayEnd, GatewayPost, GatewayStream } from './rpc-schemas.js';
import { visibleTo } from './service.js';
import type { GatewaySession, McpSessions } from './sessions.js';
import type { EventStreams } from './sse.js';

export interface GatewayRouteDeps {
  ctx: AppContext;
  directory: UpstreamDirectory;
  gateway: Gateway;
  sessions: McpSessions;
  streams: EventStreams;
}

const SlugParams = Type.Object({ upstreamSlug: Type.String({ minLength: 1, maxLength: 200 }) });

function sessionHeader(req: FastifyRequest): string | null {
  const h = req.headers['mcp-session-id'];
  return typeof h === 'string' && h !== '' ? h : null;
}

/**
 * Data plane: POST/GET/DELETE /v1/mcp/:upstreamSlug, the Streamable HTTP transport spoken to MCP
 * clients. HTTP-level failures (credentials, unknown upstream or session, rate limit) answer with the
 * API's error envelope; everything about a JSON-RPC message answers in JSON-RPC.
 */
export const gatewayRoutes: FastifyPluginAsyncTypebox<GatewayRouteDeps> = async (
  app,
  { ctx, directory, gateway, sessions, streams },
) => {
  useRpcBodyParser(app);

  /** The key's upstream: another organization's, another project's or a missing one is "not found". */
  async function upstreamFor(key: KeyPrincipal, slug: string): Promise<UpstreamRow> {
    const row = await directory.get(key.organizationId, slug);
    if (!row || !visibleTo(key, row)) {
      throw notFound(`MCP upstream "${slug}"`);
    }
    if (row.enabled !== 1) throw new AppError('service_unavailable', `MCP upstream "${slug}" is disabled`);
    return row;
  }

  function existingSession(
    req: FastifyRequest,
    key: KeyPrincipal,
    upstream: UpstreamRow,
  ): GatewaySession | null {
    const id = sessionHeader(req);
    if (id === null) return null;
    const session = sessions.get(id, { keyId: key.keyId, upstreamId: upstream.id });
    // MCP: an unknown session answers 404, and the client starts a new one with initialize.
    if (!session || configChanged(session, upstream))
      throw notFound('MCP session (send initialize to start a new one)');
    return session;
  }

  /**
   * MCP over HTTP: a request after initialize names its protocol version in MCP-Protocol-Version,
   * and one the server cannot speak answers 400. In a session that is the version the upstream
   * agreed to at initialize (which may be newer than this service's SDK knows); without a session,
   * the request runs in an upstream session opened at a version this service speaks, so the header
   * must name one of those. No header: the version is taken as agreed (MCP's fallback).
   */
  function checkVersion(req: FastifyRequest, session: GatewaySession | null): void {
    const asked = req.headers['mcp-protocol-version'];
    if (asked === undefined) return;
    const agreed = session?.protocolVersion;
    if (agreed ? asked === agreed : typeof asked === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(asked))
      return;
    throw new AppError(
      'validation_failed',
      agreed
        ? `MCP-Protocol-Version ${JSON.stringify(asked)} is not this session's protocol version (${agreed})`
        : `MCP-Protocol-Version ${JSON.stringify(asked)} is not supported (supported: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`,
    );
  }

  /**
   * Whether the upstream's configuration changed since the session opened. A change made through
   * this instance ends its sessions at once; one made through another instance is seen here (within
   * the directory's second): the session ends as it would have there.
   */
  function configChanged(session: GatewaySession, upstream: UpstreamRow): boolean {
    if (session.configuredAt === null || session.configuredAt === upstream.updated_at) return false;
    void sessions.end(session.id, 'the upstream configuration changed');
    return true;
  }

  /**
   * The id of a one-event SSE answer: recorded in the session's replay log like any stream (it is
   * one), or for a session-less request a unique id nothing can resume from.
   */
  function oneEvent(session: GatewaySession | null, answer: RpcResponse): string {
    if (!session) return `p-${randomUUID()}`;
    return session.log.append(session.log.stream('p'), JSON.stringify(answer));
  }

  /** The key the request was authenticated with, as it authenticates now: null once revoked (or replaced). */
  async function keyNow(req: FastifyRequest, key: KeyPrincipal): Promise<KeyPrincipal | null> {
    const raw = presentedKey(req);
    const now = raw ? await ctx.keys.authenticate(raw) : null;
    return now !== null && now.keyId === key.keyId ? now : null;
  }

  const rateLimit = async (key: KeyPrincipal, reply: FastifyReply) =>
    // The same budget as POST /v1/tools/validate: one budget of checked calls per key, whichever path.
    applyRateLimit(ctx.rateLimiter, 'validate', key, reply, ctx.clock.now().getTime());

  app.post(
    '/v1/mcp/:upstreamSlug',
    {
      config: { auth: 'apiKey' },
      schema: {
        summary: 'Send one MCP message to the upstream',
        params: SlugParams,
        documented: GatewayPost,
      },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const upstream = await upstreamFor(key, req.params.upstreamSlug);
      const incoming = classify(req.body);
      if (incoming.kind === 'invalid') {
        return sendRpc(
          reply,
          { jsonrpc: '2.0', id: incoming.id, error: { code: incoming.code, message: incoming.message } },
          false,
          400,
        );
      }
      // JSON-RPC servers run notifications too (they only do not answer them): a tool call without
      // an id would reach the tool unchecked and unrecorded, so it is refused, never forwarded.
      if (incoming.kind === 'notification' && incoming.message.method === 'tools/call') {
        return sendRpc(
          reply,
          rpcError(null, RPC.invalidRequest, 'Invalid Request: tools/call must be a request with an id'),
          false,
          400,
        );
      }
      const owner = { keyId: key.keyId, upstreamId: upstream.id };
      const caller = { key, upstream, connectionId: '', sessionId: null, elapsed: () => reply.elapsedTime };
      if (incoming.kind === 'request' && incoming.message.method === 'initialize') {
        // Always a new session, with an upstream session of its own: the MCP session is also the
        // policy session of the calls made in it.
        const created = sessions.create({ ...owner, organizationId: key.organizationId });
        if (typeof created === 'string')
          return sendRpc(
            reply,
            rpcError(incoming.message.id, RPC.internal, `No new MCP session: ${created}; retry later`),
            false,
          );
        created.configuredAt = upstream.updated_at;
        // A revocation that came while the upstream was looked up found no session to end: the key is
        // checked once more now that the session can be found.
        // (The revocation ends the key's other sessions itself; a store failure leaves no session behind.)
        let still: KeyPrincipal | null;
        try {
          still = await keyNow(req, key);
        } catch (err) {
          void sessions.end(created.id, 'the API key could not be checked');
          throw err;
        }
        if (!still) {
          void sessions.end(created.id, 'the API key was revoked');
          throw new AppError('invalid_api_key', 'Invalid or revoked API key');
        }
        const answer = await gateway.initialize(
          { ...caller, connectionId: created.id, sessionId: created.id },
          created,
          incoming.message,
        );
        if ('result' in answer) reply.header('mcp-session-id', created.id);
        return sendRpc(reply, answer, wantsSse(req.headers.accept), 200, () => oneEvent(created, answer));
      }
      const session = existingSession(req, key, upstream);
      checkVersion(req, session);
      if (incoming.kind === 'notification') {
        gateway.notify(session, incoming.message);
        return reply.code(202).send();
      }
      if (incoming.kind === 'response') {
        gateway.respond(session, incoming.message);
        return reply.code(202).send();
      }
      const request = incoming.message;
      // A session-less request runs in an upstream session of its own, which a revocation of the key
      // must end as it ends the key's sessions: it is tracked from here on, and the key is checked
      // once more now that a revocation can find it (one that came after the authentication found
      // nothing to end).
      const stateless = session ? null : sessions.beginStateless(key);
      try {
        if (stateless && !(await keyNow(req, key)))
          throw new AppError('invalid_api_key', 'Invalid or revoked API key');
        if (request.method === 'tools/call') await rateLimit(key, reply);
      } catch (err) {
        stateless?.release();
        throw err;
      }
      const connectionId = session?.id ?? randomUUID();
      const pending = new PendingReply(session !== null && acceptsSse(req.headers.accept), session);
      void gateway
        .dispatch(
          { ...caller, connectionId, sessionId: session?.id ?? null, stateless },
          session,
          request,
          pending,
        )
        .then((answer) => pending.finish(answer))
        .finally(() => stateless?.release());
      const outcome = await pending.outcome;
      if (outcome.kind === 'json')
        return sendRpc(reply, outcome.response, wantsSse(req.headers.accept), 200, () =>
          oneEvent(session, outcome.response),
        );
      // The upstream sent messages for this request before answering: they and then the answer go as SSE.
      pending.attach(streams.writer(req, reply, session?.id ?? null));
      return reply;
    },
  );

  app.get(
    '/v1/mcp/:upstreamSlug',
    {
      config: { auth: 'apiKey' },
      schema: {
        summary: 'The MCP server-to-client stream',
        params: SlugParams,
        documented: GatewayStream,
      },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const upstream = await upstreamFor(key, req.params.upstreamSlug);
      const owner = { keyId: key.keyId, upstreamId: upstream.id };
      const session = existingSession(req, key, upstream);
      checkVersion(req, session);
      const lastEventId = req.headers['last-event-id'];
      let resumed: ReturnType<GatewaySession['resume']> = null;
      if (typeof lastEventId === 'string' && lastEventId !== '') {
        if (!session)
          throw new AppError(
            'validation_failed',
            'Last-Event-ID resumes a stream of an MCP session: send it with Mcp-Session-Id (the key-wide decision feed is not resumable)',
          );
        resumed = session.resume(lastEventId);
        if (!resumed)
          throw new AppError(
            'conflict',
            `Cannot resume after event "${lastEventId.slice(0, 100)}": it is not an event of this session, or later events of the session are no longer held (the last ${sessions.limits.replay.events} events, at most ${sessions.limits.replay.bytes} bytes, are kept); open a new stream without Last-Event-ID`,
          );
        if (resumed.kind === 'p') {
          // A POST's answer stream: the events missed, then (if its response is still to come) the rest.
          const writer = streams.writer(req, reply, session.id);
          for (const e of resumed.events) writer.event(e.data, e.type, e.id);
          if (resumed.reply) resumed.reply.resume(writer);
          else writer.close();
          return reply;
        }
        session.replaceStream(resumed.stream);
      }
      if (session && !session.canAddStream())
        throw new AppError(
          'conflict',
          `At most ${sessions.limits.streamsPerSession} open streams per MCP session`,
        );
      // Counted from streams.start on, with nothing awaited in between: the bound holds under a burst.
      if (!session && !streams.canOpenFeed(key.keyId))
        throw new AppError(
          'conflict',
          `At most ${streams.limits.feedsPerKey} open decision feeds (GET without Mcp-Session-Id) per API key on this instance; close one first`,
        );
      const slug = req.params.upstreamSlug;
      // Without a session the stream is a feed of every decision of this key on the upstream.
      const stream = streams.start(req, reply, {
        sessionId: session?.id ?? null,
        holder: { keyId: key.keyId, organizationId: key.organizationId },
        key: resumed?.stream ?? session?.log.stream('g') ?? 'g1',
        log: session?.log ?? null,
        ...(resumed ? { replay: resumed.events } : {}),
        subscribe: (handler) => sessions.subscribe(session ? { sessionId: session.id } : owner, handler),
        touch: () => {
          if (session) void sessions.get(session.id, owner);
        },
        // An upstream deleted, disabled or moved out of the key's reach ends the stream; so does a
        // revoked key (at once, through EventStreams.endKeys; this is the backstop).
        recheck: async () => {
          const now = await keyNow(req, key);
          if (!now) return false;
          const row = await directory.get(now.organizationId, slug);
          if (!row || row.id !== upstream.id || row.enabled !== 1 || !visibleTo(now, row)) return false;
          return !session || !configChanged(session, row);
        },
      });
      // The session's upstream messages (and those that waited for a stream) come on this one.
      session?.addStream(stream);
      return reply;
    },
  );

  app.delete(
    '/v1/mcp/:upstreamSlug',
    {
      config: { auth: 'apiKey' },
      schema: {
        summary: 'End an MCP session',
        params: SlugParams,
        documented: GatewayEnd,
        response: { 204: Type.Null({ description: 'The session ended' }) },
      },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const upstream = await upstreamFor(key, req.params.upstreamSlug);
      const id = sessionHeader(req);
      if (id === null)
        throw new AppError('validation_failed', 'Mcp-Session-Id header is required to end a session');
      if (!sessions.delete(id, { keyId: key.keyId, upstreamId: upstream.id })) throw notFound('MCP session');
      return reply.code(204).send(null);
    },
  );
};
