import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.js';
import { charterServiceFor } from '../charter/routes.js';
import { createCharter } from './charter.js';
import { charterRoutes } from './charter-routes.js';
import { UpstreamDirectory } from './directory.js';
import { createGateway } from './gateway.js';
import { gatewayRoutes } from './gateway-routes.js';
import { createHttpFetch } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { createMcpRepository } from './repository.js';
import { createUpstreamService } from './service.js';
import { McpSessions } from './sessions.js';
import { EventStreams } from './sse.js';
import { probeUpstream } from './upstream-client.js';
import { upstreamRoutes } from './upstream-routes.js';

/**
 * The MCP gateway: control plane (/v1/mcp/upstreams*), data plane (/v1/mcp/:upstreamSlug) and the
 * native charter server (/v1/mcp/charter). The data plane and charter parse bodies themselves (a
 * body that is not JSON is a JSON-RPC parse error there), so each is its own encapsulated plugin.
 */
export const mcpRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const repo = createMcpRepository(ctx.store.db);
  const directory = new UpstreamDirectory(repo);
  const open = { allowPrivate: ctx.config.mcpAllowPrivateUpstreams };
  const http = createHttpFetch(open);
  const sessions = new McpSessions();
  const streams = new EventStreams();
  ctx.metrics.trackStreams('mcp_sse', () => streams.size);

  // A revoked or deleted key, or a deleted organization, ends its sessions (and their upstream
  // sessions) and its streams at once, on every instance: revocations from other instances arrive
  // through the same calls.
  const unwatch = ctx.keys.watchRevocations((r) => {
    if ('keyIds' in r) {
      void sessions.endKeys(r.keyIds, 'the API key was revoked');
      streams.endKeys(r.keyIds);
    } else {
      void sessions.endOrganization(r.organizationId, 'the organization was deleted');
      streams.endOrganization(r.organizationId);
    }
  });

  // Revocations published while this instance's Redis subscriber was away never arrive: once it is
  // subscribed again, every GET stream re-checks its key.
  ctx.redis?.onReconnect(() => streams.recheckAll());

  app.addHook('preClose', async () => {
    unwatch();
    // Event streams never go idle by themselves; end them so the server can close.
    streams.endAll();
  });
  app.addHook('onClose', async () => {
    await sessions.close();
    http.close();
  });

  const service = createUpstreamService({
    repo,
    clock: ctx.clock,
    allowPrivate: open.allowPrivate,
    changed: (org, id) => {
      directory.forget(org);
      // Sessions opened with the old settings (or to a deleted upstream) end; clients initialize again.
      void sessions.endUpstream(id, 'the upstream configuration changed');
    },
    // The probe goes through the same checked sockets as the upstream sessions.
    probe: (target) => probeUpstream(target, { ...open, fetch: http.fetch }),
  });
  await app.register(upstreamRoutes, { ctx, service });

  const gateway = createGateway({
    enforcement: ctx.enforcement,
    sessions,
    open: {
      ...open,
      fetch: http.fetch,
      request: http.request,
      observe: (m, o, s) => ctx.metrics.upstreamCall(m, o, s),
    },
    limits: DEFAULT_UPSTREAM_LIMITS,
    clock: ctx.clock,
    log: ctx.log,
  });
  await app.register(gatewayRoutes, { ctx, directory, gateway, sessions, streams });

  const charter = createCharter({
    listTools: (org) => repo.listTools(org),
    assistant: charterServiceFor(ctx),
  });
  await app.register(charterRoutes, { ctx, charter });
};
