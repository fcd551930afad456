import { Type } from '@sinclair/typebox';
import {
  JsonObject as Args,
  NO_CONTROL_CHARS,
  Nullable,
  OneOf,
  Pagination,
  Uuid,
} from '../../lib/schemas.js';
import { ToolName } from '../tools/schemas.js';

const Action = OneOf(['approve', 'deny']);
const ResolvedBy = Type.String({ minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS });
const Status = OneOf(['pending', 'approved', 'denied', 'expired']);

export const CreateApprovalBody = Type.Object(
  {
    decisionId: Type.Optional(Uuid),
    toolName: ToolName,
    arguments: Type.Optional(Args),
    expiresInSeconds: Type.Optional(Type.Number({ minimum: 60, maximum: 86_400 })),
  },
  { additionalProperties: false },
);

/** resolvedBy: with a user token it may only restate the token's sub; a key names the person it relays. */
export const ResolveBody = Type.Object(
  { action: Action, resolvedBy: Type.Optional(ResolvedBy) },
  { additionalProperties: false },
);

export const BatchResolveBody = Type.Object(
  {
    ids: Type.Array(Uuid, { minItems: 1, maxItems: 100 }),
    action: Action,
    resolvedBy: Type.Optional(ResolvedBy),
  },
  { additionalProperties: false },
);

export const CreatedApproval = Type.Object({
  id: Type.String(),
  toolName: Type.String(),
  status: Type.Literal('pending'),
  expiresAt: Type.String(),
  createdAt: Type.String(),
});

/** The approvals given so far and how many distinct people are needed (2 under dual control). */
const Approvers = Type.Array(Type.Object({ resolvedBy: Type.String(), resolvedAt: Type.String() }));
const RequiredApprovals = Type.Integer({ minimum: 1 });

export const PendingApprovalSchema = Type.Object({
  id: Type.String(),
  toolName: Type.String(),
  arguments: Args,
  status: Type.Literal('pending'),
  expiresAt: Type.String(),
  createdAt: Type.String(),
  /** From the escalated call's context, when known. */
  agentId: Type.Optional(Type.String()),
  sessionId: Type.Optional(Type.String()),
  /** The policy and the constraint that asked for a person, when known. */
  escalation: Type.Optional(
    Type.Object({
      source: OneOf(['policy', 'economic', 'gateway']),
      policy: Type.String(),
      constraint: Type.String(),
      policyVersion: Type.Optional(Type.Integer()),
      constraints: Type.Optional(
        Type.Array(
          Type.Object({ parameter: Type.String(), constraint_type: Type.String(), message: Type.String() }),
        ),
      ),
    }),
  ),
  requiredApprovals: RequiredApprovals,
  approvers: Approvers,
});

export const ApprovalSchema = Type.Object({
  id: Type.String(),
  status: Status,
  toolName: Type.String(),
  decisionId: Nullable(Type.String()),
  arguments: Type.Optional(Args),
  resolvedBy: Type.Optional(Type.String()),
  resolvedAt: Type.Optional(Type.String()),
  resolvedByKeyId: Type.Optional(Nullable(Type.String())),
  createdAt: Type.String(),
  expiresAt: Type.Optional(Type.String()),
  requiredApprovals: RequiredApprovals,
  approvers: Approvers,
});

// A string, as every integer query of the API: the query parser's own conversion reads 1.5 as 1.
export const ResolvedQuery = Type.Object({
  limit: Type.Optional(Type.String({ description: 'integer 1-200, default 50' })),
  offset: Type.Optional(Type.String({ description: 'integer >= 0, default 0' })),
});

/** GET /v1/approvals/resolved: `data` as before, and the page as GET /v1/decisions answers it. */
export const ResolvedListResponse = Type.Object({
  data: Type.Array(ApprovalSchema),
  pagination: Pagination,
});

/** `pending` when this was one approval of several (dual control) and more are needed. */
export const ResolvedSchema = Type.Object({
  id: Type.String(),
  status: OneOf(['pending', 'approved', 'denied']),
  resolvedBy: Type.String(),
  resolvedAt: Type.String(),
  requiredApprovals: RequiredApprovals,
  approvers: Approvers,
});

export const BatchResultSchema = Type.Object({
  id: Type.String(),
  status: Type.String(),
  resolvedBy: Type.Optional(Type.String()),
  resolvedAt: Type.Optional(Type.String()),
  requiredApprovals: Type.Optional(RequiredApprovals),
  approvers: Type.Optional(Approvers),
  error: Type.Optional(Type.Object({ code: Type.String(), message: Type.String() })),
});
