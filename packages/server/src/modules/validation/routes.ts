import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.js';
import { callScopeOf, type Enforced } from '../../enforcement/model.js';
import { UnrecordedError } from '../../enforcement/pipeline.js';
import { recordError } from '../../lib/json.js';
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

/** The receipt-enabled path also returns the whole receipt and where to prove it. */
const ValidateWithReceiptResponse = Type.Composite([
  ValidateResponse,
  Type.Object({
    // The committed receipt exactly as stored (docs/receipts.md), not filtered by a schema.
    receipt: Type.Any(),
    proof: Type.Object({
      inclusion_url: Type.String(),
      checkpoints_url: Type.String(),
      key_set_url: Type.String(),
    }),
  }),
]);

export const validationRoutes: FastifyPluginAsyncTypebox<{ ctx: AppContext }> = async (app, { ctx }) => {
  const validate = async (req: FastifyRequest, body: Static<typeof ValidateBody>, reply: FastifyReply) => {
    const key = req.principal as KeyPrincipal;
    let done: Enforced;
    try {
      done = await ctx.enforcement.enforce({
        scope: callScopeOf(key),
        call: {
          toolName: body.tool_name,
          arguments: body.arguments,
          context: body.context ?? {},
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
    const answer = {
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
    return { done, answer };
  };

  app.post(
    '/v1/tools/validate',
    {
      config: { auth: 'apiKey', rateLimit: 'validate' },
      schema: { body: ValidateBody, response: { 200: ValidateResponse } },
    },
    async (req, reply) => (await validate(req, req.body, reply)).answer,
  );

  // Same request, decision and rate budget as /v1/tools/validate; the caller keeps its own evidence.
  app.post(
    '/v1/validate',
    {
      config: { auth: 'apiKey', rateLimit: 'validate' },
      schema: { body: ValidateBody, response: { 200: ValidateWithReceiptResponse } },
    },
    async (req, reply) => {
      const { done, answer } = await validate(req, req.body, reply);
      const base = ctx.config.baseUrl;
      // Added to the answer rather than spread into a new object after it: V8 gave that spread a new
      // hidden class on every call, which filled the old space (docs/benchmarks.md).
      return Object.assign(answer, {
        receipt: done.fullReceipt,
        proof: {
          inclusion_url: `${base}/v1/receipts/proofs/inclusion?sequence=${done.fullReceipt.sequence}`,
          checkpoints_url: `${base}/v1/receipts/checkpoints`,
          key_set_url: `${base}/.well-known/svc-keys.json`,
        },
      });
    },
  );
};
