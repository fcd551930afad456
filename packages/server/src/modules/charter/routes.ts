import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { AppError } from '../../lib/errors.js';
import { PAGE_HEADERS } from '../../lib/page-headers.js';
import { NoBody } from '../../lib/schemas.js';
import { createPolicyRepository } from '../policies/repository.js';
import { sessionCookie } from '../sessions/cookie.js';
import { createToolRepository } from '../tools/repository.js';
import { createToolService } from '../tools/service.js';
import type { TurnInput } from './model.js';
import { verificationPage } from './page.js';
import { createCharterRepository } from './repository.js';
import {
  LinkQuery,
  TurnBody,
  TurnResultSchema,
  TurnStream,
  VerificationList,
  VerificationPage,
  VerificationParams,
  VerificationSchema,
} from './schemas.js';
import { type CharterService, createCharterService } from './service.js';

/** Builds the Charter service from the shared context (also used by the MCP charter endpoint). */
export function charterServiceFor(ctx: AppContext): CharterService {
  const tools = createToolRepository(ctx.store.db);
  const policies = createPolicyRepository(ctx.store.db);
  return createCharterService({
    db: ctx.store.db,
    repo: createCharterRepository(ctx.store.db),
    tools,
    policies,
    registry: createToolService({
      db: ctx.store.db,
      tools,
      policies,
      cache: ctx.policies,
      events: ctx.events,
      clock: ctx.clock,
    }),
    cache: ctx.policies,
    events: ctx.events,
    clock: ctx.clock,
    baseUrl: ctx.config.baseUrl,
    judgeRoute: (p) => ctx.judge.route(p),
    ask: ctx.judge.route(null).configured
      ? (organizationId, schema, system, prompt) => ctx.judge.assist(schema, system, prompt, organizationId)
      : null,
  });
}

const input = (body: {
  message: string;
  mode?: TurnInput['mode'];
  surface?: string;
  conversationId?: string;
}): TurnInput => ({
  message: body.message,
  mode: body.mode ?? 'auto',
  surface: body.surface ?? 'api',
  conversationId: body.conversationId,
});

/**
 * Charter, the policy assistant: a turn as JSON or as Server-Sent Events, the review of the changes
 * it proposes (read, approve, reject) and the review link's page.
 */
export const charterRoutes: FastifyPluginAsyncTypebox<{
  ctx: AppContext;
  service?: CharterService;
  /** The dashboard's index.html, when it is built: a signed-in person reviews the link there. */
  dashboardPage?: Buffer | null;
}> = async (app, opts) => {
  const { ctx } = opts;
  const service = opts.service ?? charterServiceFor(ctx);
  // Every /v1/charter route counts against one budget per API key or user.
  const limited = { rateLimit: 'charter' } as const;

  app.post(
    '/v1/charter/turn',
    { config: limited, schema: { body: TurnBody, response: { 200: TurnResultSchema } } },
    async (req) => service.turn(await ctx.scope(req), input(req.body)),
  );

  app.post(
    '/v1/charter/stream',
    { config: limited, schema: { body: TurnBody, response: { 200: TurnStream } } },
    async (req, reply) => {
      const scope = await ctx.scope(req);
      const turn = input(req.body);
      // Errors the caller can fix answer as JSON before the stream starts.
      if (turn.conversationId) await service.assertConversation(scope, turn.conversationId);
      reply.hijack();
      const res = reply.raw;
      const rateHeaders = Object.fromEntries(
        Object.entries(reply.getHeaders()).filter(([name]) => name.startsWith('x-ratelimit-')),
      );
      res.writeHead(200, {
        ...rateHeaders,
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        'x-request-id': req.id,
      });
      const send = (event: string, data: unknown) => {
        if (!res.destroyed) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      };
      try {
        const result = await service.turn(scope, turn, (stage, detail) =>
          send('progress', { stage, detail }),
        );
        send('result', result);
      } catch (err) {
        const known = err instanceof AppError && err.status < 500;
        if (!known) req.log.error({ err }, 'charter stream failed');
        send('error', {
          error: known
            ? { code: err.code, message: err.message }
            : { code: 'internal_error', message: `Internal error (request ${req.id})` },
        });
      } finally {
        res.end();
      }
    },
  );

  app.get(
    '/v1/charter/verifications',
    { config: limited, schema: { response: { 200: VerificationList } } },
    async (req) => ({ data: await service.listPending(await ctx.scope(req)) }),
  );

  app.get(
    '/v1/charter/verifications/:id',
    { config: limited, schema: { params: VerificationParams, response: { 200: VerificationSchema } } },
    async (req) => service.get(await ctx.scope(req), req.params.id),
  );

  const decide = {
    params: VerificationParams,
    documented: { body: NoBody },
    response: { 200: VerificationSchema },
  };

  // A person decides: a user token is required, an API key (an agent) cannot approve its own proposal.
  app.post(
    '/v1/charter/verifications/:id/approve',
    { config: { auth: 'jwt', ...limited }, schema: decide },
    async (req) => service.approve(await ctx.scope(req), req.params.id),
  );
  app.post(
    '/v1/charter/verifications/:id/reject',
    { config: { auth: 'jwt', ...limited }, schema: decide },
    async (req) => service.reject(await ctx.scope(req), req.params.id),
  );

  // The review link: no credentials, only the secret it carries. A wrong secret is a missing page.
  // A person signed in to the dashboard gets the dashboard's review page (side by side, with the
  // approve and reject buttons); anyone else the plain summary.
  const dashboardPage = opts.dashboardPage ?? null;
  const signedIn = async (req: FastifyRequest) => {
    const cookie = sessionCookie(req);
    return cookie !== null && (await ctx.sessions.lookup(cookie)) !== null;
  };
  app.get(
    '/charter/verify/:id',
    {
      config: { auth: 'none' },
      schema: {
        params: VerificationParams,
        querystring: LinkQuery,
        documented: { response: { 200: VerificationPage } },
      },
    },
    async (req, reply) => {
      const v = req.query.token ? await service.forLink(req.params.id, req.query.token) : null;
      if (!v) throw new AppError('not_found', 'Verification not found (check the link)');
      const inDashboard = dashboardPage !== null && (await signedIn(req));
      return reply
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .header('referrer-policy', 'no-referrer')
        .headers(PAGE_HEADERS)
        .header('vary', 'cookie')
        .send(inDashboard ? dashboardPage : verificationPage(v, ctx.config.baseUrl));
    },
  );
};
