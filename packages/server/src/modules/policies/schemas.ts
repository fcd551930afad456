import { Type } from '@sinclair/typebox';
import { Nullable, OneOf } from '../../lib/schemas.js';
import { NewToolName, ToolName, ToolSchema } from '../tools/schemas.js';

// Null-valued fields are removed before validation (dropNulls), so optional means "absent or null".
const Opt = Type.Optional;

/*
 * The schemas check JSON shape and closed vocabularies only. Ranges, regex usability and lengths are
 * judged by the policy engine's checkPolicyDefinition, so that the dry run can report them as issues
 * and the SDK applies exactly the same rules.
 */
const Mode = OneOf(['deterministic', 'llm']);
const Num = Opt(Type.Number());
const Bool = Opt(Type.Boolean());
const Strings = Opt(Type.Array(Type.String()));

export const ConstraintSchema = Type.Object(
  {
    argumentName: Type.String({ maxLength: 200 }),
    enabled: Bool,
    required: Bool,
    notNull: Bool,
    minimum: Num,
    maximum: Num,
    greaterThan: Num,
    lessThan: Num,
    greaterThanOrEqual: Num,
    lessThanOrEqual: Num,
    minLength: Num,
    maxLength: Num,
    enum: Strings,
    notEnum: Strings,
    regex: Opt(Type.String()),
    notRegex: Opt(Type.String()),
    minItems: Num,
    maxItems: Num,
    action: Opt(OneOf(['deny', 'require_approval'])),
  },
  { additionalProperties: false },
);

export const SessionConstraintsSchema = Type.Object(
  {
    maxCalls: Num,
    cumulativeLimits: Opt(
      Type.Array(
        Type.Object(
          { argumentName: Type.String({ maxLength: 200 }), maxValue: Type.Number() },
          { additionalProperties: false },
        ),
      ),
    ),
  },
  { additionalProperties: false },
);

export const LlmConfigSchema = Type.Object(
  {
    description: Type.String(),
    exceptions: Strings,
    argumentInstructions: Opt(
      Type.Array(
        Type.Object(
          { argumentName: Type.String(), instruction: Type.String() },
          { additionalProperties: false },
        ),
      ),
    ),
    preferredModel: Opt(OneOf(['openai', 'anthropic', 'google'])),
  },
  { additionalProperties: false },
);

const definitionFields = {
  mode: Type.Optional(Mode),
  constraints: Opt(Type.Array(ConstraintSchema)),
  sessionConstraints: Opt(SessionConstraintsSchema),
  llmConfig: Opt(LlmConfigSchema),
};

export const CreatePolicyBody = Type.Object(
  { toolName: NewToolName, ...definitionFields },
  { additionalProperties: false },
);
export const UpdatePolicyBody = Type.Object(definitionFields, { additionalProperties: false });
/** The dry run takes either body; a toolName, if sent, must match the path. */
export const ValidatePolicyBody = Type.Object(
  { toolName: Type.Optional(ToolName), ...definitionFields },
  { additionalProperties: false },
);

export const QualitySchema = Type.Object({
  valid: Type.Boolean(),
  score: Type.Number(),
  issues: Type.Array(Type.String()),
  judge: Type.Optional(
    Type.Object({
      provider: Nullable(Type.String()),
      model: Nullable(Type.String()),
      configured: Type.Boolean(),
    }),
  ),
});

export const PolicySchema = Type.Object({
  toolName: Type.String(),
  version: Type.Integer(),
  isActive: Type.Boolean(),
  mode: Mode,
  constraints: Type.Array(ConstraintSchema),
  sessionConstraints: Nullable(SessionConstraintsSchema),
  // Partial: a policy written by another path (drafts) must never fail to serialize.
  llmConfig: Nullable(Type.Partial(LlmConfigSchema)),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const PolicyWithQuality = Type.Composite([PolicySchema, Type.Object({ quality: QualitySchema })]);
/** `tool` is null when no tool of that name is registered. */
export const PolicyWithTool = Type.Composite([PolicySchema, Type.Object({ tool: Nullable(ToolSchema) })]);

export const PolicyParams = Type.Object({ toolName: ToolName });
export const PolicyMessage = Type.Object({ success: Type.Literal(true), message: Type.String() });

export const PolicyVersionParams = Type.Object({
  toolName: ToolName,
  version: Type.String({ maxLength: 12 }),
});
export const PolicyVersionQuery = Type.Object({
  policy_hash: Type.Optional(Type.String({ pattern: '^sha256:[0-9a-f]{64}$' })),
});
export const PolicyVersionSchema = Type.Object({
  toolName: Type.String(),
  version: Type.Integer(),
  /** sha256:<hex> of the RFC 8785 canonical JSON of `definition`: the receipts' policy_hash. */
  policyHash: Type.String(),
  // Exactly the object that was hashed, serialized as stored (no schema filtering), so anyone can rehash it.
  definition: Type.Any(),
  createdAt: Type.String(),
});
