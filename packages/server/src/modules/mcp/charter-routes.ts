import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppContext } from '../../context.js';
import { AppError } from '../../lib/errors.js';
import { errorResponse } from '../../plugins/openapi.js';
import type { Charter } from './charter.js';
import { classify, RPC, type RpcResponse, rpcError, sendRpc, useRpcBodyParser, wantsSse } from './jsonrpc.js';
import { CharterPost } from './rpc-schemas.js';

/** POST /v1/mcp/charter: the native MCP server (stateless Streamable HTTP, JSON-RPC in, JSON-RPC out). */
export const charterRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext; charter: Charter }> = async (
  app,
  { ctx, charter },
) => {
  useRpcBodyParser(app);

  app.post(
    '/v1/mcp/charter',
    {
      // Charter's turns through MCP count against the budget of /v1/charter/* (per API key).
      config: { auth: 'apiKey', rateLimit: 'charter' },
      schema: { summary: 'Charter as an MCP server', documented: CharterPost },
    },
    async (req, reply) => {
      const incoming = classify(req.body);
      if (incoming.kind === 'invalid') {
        return sendRpc(reply, rpcError(incoming.id, incoming.code, incoming.message), false, 400);
      }
      if (incoming.kind !== 'request') return reply.code(202).send();
      const scope = await ctx.scope(req);
      let answer: RpcResponse;
      try {
        answer = await charter.handle(scope, incoming.message);
      } catch (err) {
        req.log.error({ err }, 'charter request failed');
        answer = rpcError(incoming.message.id, RPC.internal, `Internal error (request ${req.id})`);
      }
      return sendRpc(reply, answer, wantsSse(req.headers.accept));
    },
  );

  // No server-to-client stream and no sessions: MCP clients read 405 on GET as "no stream offered".
  const notAllowed = async () => {
    throw new AppError(
      'method_not_allowed',
      'POST /v1/mcp/charter only: this endpoint has no stream and no sessions',
    );
  };
  // Documented as what they are: refused, always.
  const refused = {
    schema: {
      documented: {
        response: {
          405: {
            ...errorResponse(405),
            description: 'Always: this endpoint has no stream and no sessions (`Allow: POST`)',
          },
        },
      },
    },
  };
  app.get('/v1/mcp/charter', { config: { auth: 'apiKey' }, ...refused }, async (_req, reply) => {
    reply.header('allow', 'POST');
    return notAllowed();
  });
  app.delete('/v1/mcp/charter', { config: { auth: 'apiKey' }, ...refused }, async (_req, reply) => {
    reply.header('allow', 'POST');
    return notAllowed();
  });
};
