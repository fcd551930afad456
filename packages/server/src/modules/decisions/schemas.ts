import { Type } from '@sinclair/typebox';
import { FailedConstraintSchema, JsonObject, Nullable, Pagination, Uuid } from '../../lib/schemas.js';
import { ToolName } from '../tools/schemas.js';

const Counts = {
  allowed: Type.Integer(),
  denied: Type.Integer(),
  escalated: Type.Integer(),
  deterministic: Type.Integer(),
  llm: Type.Integer(),
};

export const DecisionSchema = Type.Object({
  id: Type.String(),
  projectId: Nullable(Type.String()),
  toolName: Type.String(),
  arguments: JsonObject,
  context: JsonObject,
  decision: Type.String(),
  mode: Type.String(),
  reason: Type.String(),
  failedArgument: Nullable(Type.String()),
  matchedException: Nullable(Type.String()),
  validations: Nullable(Type.Array(FailedConstraintSchema)),
  latencyMs: Type.Number(),
  policyVersion: Nullable(Type.Integer()),
  receipt: Type.Object({
    receipt_id: Type.String(),
    receipt_hash: Type.String(),
    previous_receipt_hash: Type.String(),
    merkle_root: Type.String(),
  }),
  createdAt: Type.String(),
});

// Numbers and dates stay strings here (query strings are not coerced); query.ts parses them.
export const ListQuery = Type.Object({
  limit: Type.Optional(Type.String({ description: 'integer 1-100, default 50' })),
  offset: Type.Optional(Type.String({ description: 'integer >= 0, default 0' })),
  projectId: Type.Optional(Uuid),
  toolName: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  decision: Type.Optional(Type.String({ description: 'allow, deny or require_approval' })),
  startDate: Type.Optional(Type.String({ description: 'ISO 8601 date or date-time, inclusive' })),
  endDate: Type.Optional(
    Type.String({ description: 'ISO 8601 date (whole UTC day included) or date-time, inclusive' }),
  ),
});

export const ListResponse = Type.Object({
  data: Type.Array(DecisionSchema),
  pagination: Pagination,
});

export const StatsQuery = Type.Object({
  days: Type.Optional(Type.String({ description: 'integer 1-90, default 7' })),
  projectId: Type.Optional(Uuid),
});

export const StatsResponse = Type.Object({
  period: Type.Object({ days: Type.Integer() }),
  summary: Type.Object({ total: Type.Integer(), ...Counts }),
  breakdown: Type.Array(Type.Object({ date: Type.String(), ...Counts })),
});

export const DecisionParams = Type.Object({ id: Uuid });

// Unknown fields are ignored rather than refused: newer SDKs may send more than this version reads.
export const LogBody = Type.Object({
  tool_name: ToolName,
  arguments: JsonObject,
  decision: Type.Union([Type.Literal('allow'), Type.Literal('deny')]),
  reason: Type.Optional(Type.String({ maxLength: 2000 })),
  mode: Type.Literal('deterministic'),
  latency_ms: Type.Number({ minimum: 0 }),
  source: Type.Literal('client'),
  context: Type.Optional(JsonObject),
});

/** Most client decisions POST /v1/decisions takes in one request (one hit against its rate limit). */
export const MAX_LOG_BATCH = 500;

/** One decision, or a batch recorded all or nothing. */
export const LogRequest = Type.Union([
  LogBody,
  Type.Array(LogBody, { minItems: 1, maxItems: MAX_LOG_BATCH }),
]);

export const LogResponse = Type.Union([
  Type.Object({ success: Type.Literal(true), id: Type.String() }),
  Type.Object({ success: Type.Literal(true), ids: Type.Array(Type.String()) }),
]);
