import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { callScopeOf } from '../../enforcement/model.js';
import { UnrecordedError } from '../../enforcement/pipeline.js';
import { roundMs } from '../../lib/clock.js';
import { AppError } from '../../lib/errors.js';
import { assertJsonDepth, recordError } from '../../lib/json.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { createReceiptRepository } from '../receipts/repository.js';
import { intParam, parseListQuery } from './query.js';
import { createDecisionRepository } from './repository.js';
import {
  DecisionParams,
  DecisionSchema,
  ListQuery,
  ListResponse,
  LogBody,
  LogResponse,
  StatsQuery,
  StatsResponse,
} from './schemas.js';
import { createDecisionService } from './service.js';

export const decisionRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const service = createDecisionService({
    decisions: createDecisionRepository(ctx.store.db),
    receipts: createReceiptRepository(ctx.store.db),
    enforcement: ctx.enforcement,
    clock: ctx.clock,
  });

  app.get(
    '/v1/decisions',
    { schema: { querystring: ListQuery, response: { 200: ListResponse } } },
    async (req) => {
      const scope = await ctx.scope(req);
      const { filter, limit, offset } = parseListQuery(req.query);
      return service.list(scope, filter, limit, offset);
    },
  );

  app.get(
    '/v1/decisions/stats',
    { schema: { querystring: StatsQuery, response: { 200: StatsResponse } } },
    async (req) => {
      const scope = await ctx.scope(req);
      return service.stats(scope, intParam('days', req.query.days, 1, 90, 7), req.query.projectId);
    },
  );

  app.get(
    '/v1/decisions/:id',
    { schema: { params: DecisionParams, response: { 200: DecisionSchema } } },
    async (req) => service.get(await ctx.scope(req), req.params.id),
  );

  app.get(
    '/v1/decisions/:id/receipt',
    // The full svc.receipt/1 payload; its fields are documented with the receipt format.
    {
      schema: { params: DecisionParams, response: { 200: Type.Object({}, { additionalProperties: true }) } },
    },
    async (req, reply) => {
      const payload = await service.receipt(await ctx.scope(req), req.params.id);
      // Sent as stored: a JSON string with a JSON content type is not re-serialized.
      return reply.type('application/json; charset=utf-8').send(payload);
    },
  );

  app.post(
    '/v1/decisions',
    {
      config: { auth: 'apiKey', rateLimit: 'decisions' },
      schema: { body: LogBody, response: { 201: LogResponse } },
      // After the rate limit (counted by its hook), before body validation.
      preValidation: async (req) => {
        const key = req.principal as KeyPrincipal;
        if (!key.projectId) {
          throw new AppError('missing_project', 'This API key is not scoped to a project; use a project key');
        }
      },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const scope = callScopeOf(key);
      assertJsonDepth({ arguments: req.body.arguments, context: req.body.context });
      let id: string;
      try {
        ({ id } = await service.log(scope, {
          toolName: req.body.tool_name,
          arguments: req.body.arguments,
          context: req.body.context ?? {},
          decision: req.body.decision,
          reason: req.body.reason,
          latencyMs: roundMs(req.body.latency_ms),
        }));
      } catch (err) {
        const cause = err instanceof UnrecordedError ? err.cause : err;
        req.log.error({ err: cause }, 'client decision could not be recorded');
        throw recordError(cause, 'The decision could not be recorded durably; retry');
      }
      return reply.code(201).send({ success: true as const, id });
    },
  );
};
