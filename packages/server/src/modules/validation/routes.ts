import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { roundMs } from '../../lib/clock.js';
import { assertJsonDepth, recordError } from '../../lib/json.js';
import { FailedConstraintSchema, JsonObject } from '../../lib/schemas.js';
import { enforceRateLimit, validationLimit } from '../../plugins/rate-limit.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { ToolName } from '../tools/schemas.js';
import type { Recorded } from './service.js';
import { callScopeOf } from './service.js';

const ValidateBody = Type.Object({
  tool_name: ToolName,
  arguments: JsonObject,
  context: Type.Optional(JsonObject),
});

const ValidateResponse = Type.Object({
  decision: Type.Union([Type.Literal('allow'), Type.Literal('deny'), Type.Literal('require_approval')]),
  reason: Type.Optional(Type.String()),
  failed_constraints: Type.Optional(Type.Array(FailedConstraintSchema)),
  approval_id: Type.Optional(Type.String()),
  metadata: Type.Object({
    decision_id: Type.String(),
    policy_version: Type.Union([Type.Integer(), Type.Null()]),
    mode: Type.String(),
  }),
  latency_ms: Type.Number(),
});

export const validationRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  app.post(
    '/v1/tools/validate',
    {
      config: { auth: 'apiKey' },
      schema: { body: ValidateBody, response: { 200: ValidateResponse } },
      // Counted before body validation, so every answer of this route carries the X-RateLimit headers.
      preValidation: async (req, reply) => {
        const key = req.principal as KeyPrincipal;
        const limit = validationLimit(key.tier, key.rateLimitPerMinute);
        await enforceRateLimit(
          ctx.rateLimiter,
          reply,
          `validate:${key.keyId}`,
          limit,
          60_000,
          ctx.clock.now().getTime(),
        );
      },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      const scope = callScopeOf(key);
      assertJsonDepth({ arguments: req.body.arguments, context: req.body.context });
      const call = {
        toolName: req.body.tool_name,
        arguments: req.body.arguments,
        context: req.body.context ?? {},
      };
      const decided = await ctx.validation.decide(scope, call);
      const latencyMs = roundMs(reply.elapsedTime);
      let recorded: Recorded;
      try {
        recorded = await ctx.validation.record(scope, call, decided, { source: 'server', latencyMs });
      } catch (err) {
        req.log.error({ err }, 'decision could not be recorded');
        // Fail closed: an unrecorded decision is never answered as a decision.
        throw recordError(err, 'The decision could not be recorded durably; retry the call');
      }
      return {
        decision: decided.decision,
        reason: decided.reason,
        ...(decided.failedConstraints.length > 0
          ? { failed_constraints: [...decided.failedConstraints] }
          : {}),
        ...(recorded.approvalId ? { approval_id: recorded.approvalId } : {}),
        metadata: {
          decision_id: recorded.decisionId,
          policy_version: decided.policy?.version ?? null,
          mode: decided.mode,
        },
        latency_ms: latencyMs,
      };
    },
  );
};
