import { Type } from '@sinclair/typebox';
import { NO_CONTROL_CHARS, Nullable, OneOf, Uuid } from '../../lib/schemas.js';
import { NewToolName } from '../tools/schemas.js';
import { DRAFT_STATUSES } from './model.js';

const Status = OneOf(DRAFT_STATUSES);

/*
 * The rule shape of SPEC §2. Shape only: whether a rule can become constraints is decided on
 * approval (compileDraftRules) and reported there; operators and rule ids are checked by the service.
 */
export const DraftRuleSchema = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS }),
    action: Type.String({ minLength: 1, maxLength: 50 }),
    tools: Type.Array(NewToolName, { maxItems: 100 }),
    conditions: Type.Array(
      Type.Object(
        {
          field: Type.String({ minLength: 1, maxLength: 500 }),
          operator: Type.String({ minLength: 1, maxLength: 50 }),
          value: Type.Optional(Type.Unknown()),
        },
        { additionalProperties: false },
      ),
      { maxItems: 50 },
    ),
    severity: Type.String({ minLength: 1, maxLength: 50 }),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const Rules = Type.Array(DraftRuleSchema, { maxItems: 200 });
const DraftName = Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS });
const Description = Type.String({ maxLength: 5000 });

export const CreateDraftBody = Type.Object(
  {
    name: DraftName,
    description: Type.Optional(Description),
    projectId: Uuid,
    createdByAgentId: Type.String({ minLength: 1, maxLength: 200 }),
    rules: Rules,
  },
  { additionalProperties: false },
);

export const PatchDraftBody = Type.Object(
  {
    name: Type.Optional(DraftName),
    description: Type.Optional(Description),
    rules: Type.Optional(Rules),
    status: Type.Optional(Status),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const ListDraftsQuery = Type.Object({ projectId: Type.Optional(Uuid), status: Type.Optional(Status) });

export const DraftSchema = Type.Object({
  id: Type.String(),
  organizationId: Type.String(),
  projectId: Type.String(),
  name: Type.String(),
  description: Type.String(),
  status: Status,
  createdByAgentId: Type.String(),
  rules: Type.Array(DraftRuleSchema),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  reviewedBy: Nullable(Type.String()),
  reviewedAt: Nullable(Type.String()),
  revision: Type.String({
    description:
      'A hash of the project, name, description and rules: send it as If-Match when approving to apply only what was read',
  }),
});

export const DraftEnvelope = Type.Object({ data: DraftSchema });

export const ApprovedDraft = Type.Object({
  data: DraftSchema,
  applied: Type.Array(
    Type.Object({ toolName: Type.String(), version: Type.Integer(), created: Type.Boolean() }),
  ),
  skipped: Type.Array(
    Type.Object({ ruleId: Type.String(), toolName: Type.Optional(Type.String()), reason: Type.String() }),
  ),
});

export const ReplayBody = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1000,
        description: "How many of the most recent decisions for the draft's tools to replay (default 100)",
      }),
    ),
  },
  { additionalProperties: false },
);

const Failed = Type.Object({
  parameter: Type.String(),
  constraint_type: Type.String(),
  expected: Type.Unknown(),
  actual: Type.Unknown(),
  message: Type.String(),
});

export const ReplaySchema = Type.Object({
  data: Type.Object({
    draftId: Type.String(),
    revision: Type.String({ description: 'The revision of the draft that was replayed' }),
    tools: Type.Array(Type.String()),
    examined: Type.Integer(),
    truncated: Type.Boolean(),
    changed: Type.Array(
      Type.Object({
        decisionId: Type.String(),
        toolName: Type.String(),
        arguments: Type.Record(Type.String(), Type.Unknown()),
        createdAt: Type.String(),
        agentId: Type.Optional(Type.String()),
        sessionId: Type.Optional(Type.String()),
        before: Type.Object({ decision: Type.String(), reason: Type.String() }),
        after: Type.Object({
          decision: OneOf(['allow', 'deny', 'require_approval']),
          reason: Type.String(),
          failedConstraints: Type.Array(Failed),
        }),
      }),
    ),
    skipped: Type.Array(
      Type.Object({ ruleId: Type.String(), toolName: Type.Optional(Type.String()), reason: Type.String() }),
    ),
  }),
});
