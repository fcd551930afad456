import { Type } from '@sinclair/typebox';
import { NO_CONTROL_CHARS, Nullable, OneOf, PATH_NAME } from '../../lib/schemas.js';

/*
 * Request bodies reach these schemas with null-valued fields already removed (see dropNulls): the spec's
 * "?" means optional or null, and plain optionals keep validation messages precise.
 */
const Opt = Type.Optional;

export const ToolName = Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS });
/** The name of a tool or policy being created: it will be addressed in a path (see PATH_NAME). */
export const NewToolName = Type.String({ minLength: 1, maxLength: 200, pattern: PATH_NAME });
export const ArgumentName = Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS });
const ArgType = OneOf(['string', 'number', 'boolean', 'array', 'object']);

const baseArgument = {
  name: ArgumentName,
  type: ArgType,
  description: Opt(Type.String()),
  required: Opt(Type.Boolean()),
};
const registerExtras = {
  enum: Opt(Type.Array(Type.String())),
  minimum: Opt(Type.Number()),
  maximum: Opt(Type.Number()),
  pattern: Opt(Type.String()),
};

const RegisterParameter = Type.Object(
  { ...baseArgument, ...registerExtras },
  { additionalProperties: false },
);
const SyncArgument = Type.Object(baseArgument, { additionalProperties: false });

export const RegisterBody = Type.Object(
  {
    tools: Type.Array(
      Type.Object(
        { name: NewToolName, description: Opt(Type.String()), parameters: Type.Array(RegisterParameter) },
        { additionalProperties: false },
      ),
      { minItems: 1 },
    ),
  },
  { additionalProperties: false },
);

export const SyncBody = Type.Object(
  {
    tools: Type.Array(
      Type.Object(
        { name: NewToolName, description: Opt(Type.String()), arguments: Type.Array(SyncArgument) },
        { additionalProperties: false },
      ),
      { minItems: 1 },
    ),
  },
  { additionalProperties: false },
);

export const RegisterResponse = Type.Object({
  success: Type.Literal(true),
  registered_tools: Type.Array(Type.String()),
  message: Type.String(),
});

export const SyncResponse = Type.Object({
  synced: Type.Integer(),
  tools: Type.Array(
    Type.Object({
      name: Type.String(),
      status: Type.Union([Type.Literal('created'), Type.Literal('updated')]),
    }),
  ),
  policiesGenerated: Type.Integer(),
});

/** Arguments come back as registered, including register's enum/minimum/maximum/pattern. */
export const StoredArgument = Type.Object({
  name: Type.String(),
  type: Type.String(),
  description: Type.Optional(Type.String()),
  required: Type.Optional(Type.Boolean()),
  enum: Type.Optional(Type.Array(Type.String())),
  minimum: Type.Optional(Type.Number()),
  maximum: Type.Optional(Type.Number()),
  pattern: Type.Optional(Type.String()),
});

export const ToolSchema = Type.Object({
  name: Type.String(),
  description: Nullable(Type.String()),
  arguments: Type.Array(StoredArgument),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const ToolParams = Type.Object({ name: ToolName });
