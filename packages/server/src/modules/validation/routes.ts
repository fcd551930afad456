import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.js';
import { callScopeOf, type Enforced } from '../../enforcement/model.js';
import { UnrecordedError } from '../../enforcement/pipeline.js';
import { assertJsonDepth, recordError } from '../../lib/json.js';
import { FailedConstraintSchema, JsonObject } from '../../lib/schemas.js';
import type { KeyPrincipal } from '../api-keys/authenticator.js';
import { ToolName } from '../tools/schemas.js';

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
      config: { auth: 'apiKey', rateLimit: 'validate' },
      schema: { body: ValidateBody, response: { 200: ValidateResponse } },
    },
    async (req, reply) => {
      const key = req.principal as KeyPrincipal;
      assertJsonDepth({ arguments: req.body.arguments, context: req.body.context });
      let done: Enforced;
      try {
        done = await ctx.enforcement.enforce({
          scope: callScopeOf(key),
          call: {
            toolName: req.body.tool_name,
            arguments: req.body.arguments,
            context: req.body.context ?? {},
          },
          source: 'server',
          elapsed: () => reply.elapsedTime,
        });
      } catch (err) {
        if (!(err instanceof UnrecordedError)) throw err;
        req.log.error({ err: err.cause }, 'decision could not be recorded');
        // Fail closed: an unrecorded decision is never answered as a decision.
        throw recordError(err.cause, 'The decision could not be recorded durably; retry the call');
      }
      return {
        decision: done.decision,
        reason: done.reason,
        ...(done.failedConstraints.length > 0 ? { failed_constraints: [...done.failedConstraints] } : {}),
        ...(done.approvalId ? { approval_id: done.approvalId } : {}),
        metadata: {
          decision_id: done.decisionId,
          policy_version: done.policyVersion,
          mode: done.mode,
        },
        latency_ms: done.latencyMs,
      };
    },
  );
};
