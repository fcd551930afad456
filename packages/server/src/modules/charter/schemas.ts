import { Type } from '@sinclair/typebox';
import { JsonObject, Nullable, OneOf, Uuid } from '../../lib/schemas.js';
import {
  ConstraintSchema,
  LlmConfigSchema,
  QualitySchema,
  SessionConstraintsSchema,
} from '../policies/schemas.js';
import { StoredArgument } from '../tools/schemas.js';

export const TurnBody = Type.Object(
  {
    message: Type.String({ minLength: 1, maxLength: 20_000 }),
    mode: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('chat'), Type.Literal('compile')])),
    surface: Type.Optional(Type.String({ minLength: 1, maxLength: 50 })),
    conversationId: Type.Optional(Uuid),
  },
  { additionalProperties: false },
);

export const VerificationParams = Type.Object({ id: Uuid });
export const LinkQuery = Type.Object({ token: Type.Optional(Type.String({ maxLength: 200 })) });

/* Answers. They mirror model.ts; a field left out here would be left out of the answer. */

const Decision = OneOf(['allow', 'deny', 'require_approval']);

export const PolicyDefinitionSchema = Type.Object({
  mode: OneOf(['deterministic', 'llm']),
  constraints: Type.Optional(Type.Array(ConstraintSchema)),
  sessionConstraints: Type.Optional(Nullable(SessionConstraintsSchema)),
  llmConfig: Type.Optional(Nullable(Type.Partial(LlmConfigSchema))),
});

const NotUnderstoodSchema = Type.Object({ text: Type.String(), why: Type.String() });

const PolicyChangeSchema = Type.Object({
  toolName: Type.String(),
  current: Nullable(
    Type.Object({
      version: Type.Integer(),
      isActive: Type.Optional(
        Type.Boolean({
          description:
            'Whether the policy was enforced when the change was proposed; approval applies only over the same state (absent on older proposals: read as active)',
        }),
      ),
      definition: PolicyDefinitionSchema,
    }),
  ),
  proposed: PolicyDefinitionSchema,
  rules: Type.Array(Type.String(), { description: 'The sentences the proposal comes from' }),
  quality: QualitySchema,
  analysis: Type.Object({
    findings: Type.Array(
      Type.Object({
        kind: OneOf([
          'unknown_argument',
          'never_matches',
          'blocks_everything',
          'allows_everything',
          'replaces_llm_policy',
        ]),
        message: Type.String(),
      }),
    ),
    examples: Type.Array(Type.Object({ arguments: JsonObject, decision: Decision, reason: Type.String() })),
  }),
});

const VerificationStatus = OneOf(['pending', 'approved', 'rejected']);

/** A change waiting for a person (or resolved by one): nothing in it is live until approved. */
export const VerificationSchema = Type.Object({
  id: Type.String(),
  kind: OneOf(['policy_change', 'tool_registration']),
  status: VerificationStatus,
  conversationId: Nullable(Type.String()),
  summary: Type.String(),
  changes: Type.Array(PolicyChangeSchema),
  tools: Type.Array(
    Type.Object({
      name: Type.String(),
      description: Type.Optional(Type.String()),
      arguments: Type.Array(StoredArgument),
    }),
  ),
  createdAt: Type.String(),
  resolvedAt: Nullable(Type.String()),
  resolvedBy: Nullable(Type.String()),
  applied: Nullable(Type.Array(Type.Object({ toolName: Type.String(), version: Type.Integer() }))),
});

export const VerificationList = Type.Object({ data: Type.Array(VerificationSchema) });

export const TurnResultSchema = Type.Object({
  conversationId: Type.String(),
  mode: OneOf(['chat', 'compile']),
  reply: Type.String(),
  understood: Type.Array(Type.String()),
  notUnderstood: Type.Array(NotUnderstoodSchema),
  changes: Type.Array(PolicyChangeSchema),
  dryRuns: Type.Array(
    Type.Object({
      toolName: Type.String(),
      arguments: JsonObject,
      decision: Type.String(),
      reason: Type.String(),
    }),
  ),
  verification: Type.Union([
    Type.Object({
      required: Type.Literal(true),
      id: Type.String(),
      status: VerificationStatus,
      linkUrl: Type.String(),
    }),
    Type.Object({ required: Type.Literal(false) }),
  ]),
});

/** POST /v1/charter/stream: Server-Sent Events. */
export const TurnStream = {
  description:
    'Server-Sent Events: `progress` events `{stage, detail}` while the turn runs, then one `result` (the answer of POST /v1/charter/turn) or one `error` (`{error: {code, message}}`).',
  content: { 'text/event-stream': { schema: Type.String() } },
};

/** GET /charter/verify/:id: the review page of a link. */
export const VerificationPage = {
  description:
    "The review page (HTML): the dashboard's to a person signed in to it, else a summary of the verification.",
  content: { 'text/html': { schema: Type.String() } },
};
