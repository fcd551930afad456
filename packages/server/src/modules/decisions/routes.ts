import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { callScopeOf } from '../../enforcement/model.js';
import { UnrecordedError } from '../../enforcement/pipeline.js';
import { roundMs } from '../../lib/clock.js';
import { AppError, invalid } from '../../lib/errors.js';
import { recordError } from '../../lib/json.js';
import { compileSchema, documentedPage } from '../../lib/schemas.js';
import { isStoreUnavailable } from '../../storage/db.js';
import { isUniqueViolation } from '../../storage/errors.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { createReceiptRepository } from '../receipts/repository.js';
import {
  claimedDecisionIds,
  decisionLogIdempotency,
  IDEMPOTENCY_ERRORS,
  IdempotencyKeyHeader,
} from './idempotency.js';
import { intParam, parseListQuery } from './query.js';
import { createDecisionRepository } from './repository.js';
import {
  DecisionParams,
  DecisionSchema,
  ListQuery,
  ListResponse,
  LogBody,
  LogRequest,
  LogResponse,
  MAX_LOG_BATCH,
  StatsQuery,
  StatsResponse,
} from './schemas.js';
import { createDecisionService } from './service.js';

const checkLogBody = compileSchema(LogBody);

/*
 * The queries as the API document describes them: the numbers and the decision filter are checked by
 * query.ts (the route's schema leaves them strings, so its messages and order stay), within these bounds.
 */
const ListQueryDocumented = Type.Object({
  ...ListQuery.properties,
  ...documentedPage(100),
  decision: Type.Optional(
    Type.String({
      enum: ['allow', 'deny', 'require_approval'],
      description: 'require_approval: escalated calls',
    }),
  ),
});
const StatsQueryDocumented = Type.Object({
  ...StatsQuery.properties,
  days: Type.Optional(Type.Integer({ minimum: 1, maximum: 90, default: 7 })),
});

/**
 * The body is one decision or an array of them; a union's own error says only "Expected union
 * value", so each decision is checked here to name the offending field (`body/3/decision ...`).
 */
function assertLogRequest(body: unknown): void {
  const batch = Array.isArray(body);
  if (batch && (body.length === 0 || body.length > MAX_LOG_BATCH)) {
    throw invalid(`body must hold 1 to ${MAX_LOG_BATCH} decisions (got ${body.length})`);
  }
  for (const [i, item] of (batch ? body : [body]).entries()) {
    const first = checkLogBody.Errors(item).First();
    if (first) throw invalid(`body${batch ? `/${i}` : ''}${first.path} ${first.message}`);
  }
}

export const decisionRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const decisions = createDecisionRepository(ctx.store.db);
  const service = createDecisionService({
    decisions,
    receipts: createReceiptRepository(ctx.store.db),
    enforcement: ctx.enforcement,
    clock: ctx.clock,
  });
  const idempotent = decisionLogIdempotency(ctx, decisions);

  app.get(
    '/v1/decisions',
    {
      schema: {
        querystring: ListQuery,
        response: { 200: ListResponse },
        documented: { querystring: ListQueryDocumented },
      },
    },
    async (req) => {
      const scope = await ctx.scope(req);
      const { filter, limit, offset } = parseListQuery(req.query);
      return service.list(scope, filter, limit, offset);
    },
  );

  app.get(
    '/v1/decisions/stats',
    {
      schema: {
        querystring: StatsQuery,
        response: { 200: StatsResponse },
        documented: { querystring: StatsQueryDocumented },
      },
    },
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
      schema: {
        body: LogRequest,
        response: { 201: LogResponse },
        documented: { headers: IdempotencyKeyHeader, errors: IDEMPOTENCY_ERRORS },
      },
      // After the rate limit (counted by its hook), before body validation.
      preValidation: async (req) => {
        const key = req.principal as KeyPrincipal;
        if (!key.projectId) {
          throw new AppError('missing_project', 'This API key is not scoped to a project; use a project key');
        }
        assertLogRequest(req.body);
      },
      // Idempotency-Key: once the body is known valid, so a refused request takes no key; a replay
      // answers here and records nothing (no decision, receipt or event).
      preHandler: idempotent.preHandler,
      onSend: idempotent.onSend,
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const batch = Array.isArray(req.body);
      const bodies = Array.isArray(req.body) ? req.body : [req.body];
      // Under an Idempotency-Key the ids derive from its claim, so that a request sent again after
      // this one's process died can tell whether the batch was recorded, and a takeover of a claim
      // whose request still waits for the store records the same ids: only one commit lands
      // (./idempotency.ts).
      const claim = idempotent.claimOf(req);
      const decisionIds = claim ? claimedDecisionIds(claim, bodies.length) : undefined;
      const inputs = bodies.map((body, i) => ({
        toolName: body.tool_name,
        arguments: body.arguments,
        context: body.context ?? {},
        decision: body.decision,
        reason: body.reason,
        latencyMs: roundMs(body.latency_ms),
        decisionId: decisionIds?.[i],
      }));
      let ids: string[];
      try {
        ids = batch
          ? await service.logMany(callScopeOf(key), inputs)
          : [(await service.log(callScopeOf(key), inputs[0]!)).id];
      } catch (err) {
        const cause = err instanceof UnrecordedError ? err.cause : err;
        // The same ids already in the log: another request with this key recorded the batch (one
        // instance took over the claim of a request still waiting for the store on another, and the
        // other commit landed first). It is recorded once, under these ids: that is the answer.
        if (claim && isUniqueViolation(cause)) {
          const done = await idempotent.recorded(claim, req.body).catch((lookupErr: unknown) => {
            req.log.warn({ err: lookupErr }, 'whether the batch was recorded could not be read');
            // Most likely it was: the key is kept, and looked up again once its claim is stale.
            idempotent.outcomeUnknown(req);
            return null;
          });
          if (done) {
            req.log.warn(
              'this Idempotency-Key request was recorded by another request with the key (a takeover); answering its ids',
            );
            return reply.code(201).send(done);
          }
        }
        req.log.error({ err: cause }, 'client decision could not be recorded');
        // The store stopped answering: the batch may yet commit, so its key is not freed now.
        if (isStoreUnavailable(cause)) idempotent.outcomeUnknown(req);
        throw recordError(cause, 'The decision could not be recorded durably; retry');
      }
      return reply
        .code(201)
        .send(batch ? { success: true as const, ids } : { success: true as const, id: ids[0]! });
    },
  );
};
