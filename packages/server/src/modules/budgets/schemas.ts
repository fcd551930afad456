import { Type } from '@sinclair/typebox';
import {
  JsonObject,
  NO_CONTROL_CHARS,
  NONEMPTY_NO_CONTROL_CHARS,
  Nullable,
  OneOf,
  PatternRecord,
} from '../../lib/schemas.js';

/** The longest identifier, in characters. */
export const MAX_ID_CHARS = 200;
/** Identifiers of actions, sessions, agents, categories, payers and tools. */
const Id = Type.String({ minLength: 1, maxLength: MAX_ID_CHARS, pattern: NO_CONTROL_CHARS });
/** Dollars; exactness (at most six decimals) is checked by the service. */
const Usd = Type.Number({ minimum: 0, maximum: 1_000_000_000 });
const Scope = OneOf(['session', 'agent', 'category']);
const Window = OneOf(['day', 'month', 'lifetime']);

export const AuthorizeBody = Type.Object(
  {
    actionId: Id,
    sessionId: Id,
    agentId: Id,
    toolName: Id,
    category: Id,
    payer: Type.Optional(Nullable(Id)),
    mode: Type.Optional(OneOf(['live', 'simulation'])),
    estimatedSpendUsd: Usd,
    maxAcceptableSpendUsd: Type.Optional(Nullable(Usd)),
    budgetScopes: Type.Optional(Type.Array(Scope, { minItems: 1, maxItems: 3, uniqueItems: true })),
    metadata: Type.Optional(JsonObject),
    approvalId: Type.Optional(Nullable(Id)),
  },
  { additionalProperties: false },
);

export const CommitBody = Type.Object(
  {
    actionId: Id,
    sessionId: Id,
    agentId: Id,
    toolName: Id,
    category: Id,
    payer: Type.Optional(Nullable(Id)),
    quotedSpendUsd: Usd,
    actualSpendUsd: Usd,
    approvalId: Type.Optional(Nullable(Id)),
  },
  { additionalProperties: false },
);

export const StatusBody = Type.Object(
  { sessionId: Id, agentId: Id, category: Type.Optional(Id) },
  { additionalProperties: false },
);

const CategoryPolicyBody = Type.Object(
  { limitUsd: Type.Optional(Nullable(Usd)), approvalThresholdUsd: Type.Optional(Nullable(Usd)) },
  { additionalProperties: false },
);

export const ConfigBody = Type.Object(
  {
    defaultPayer: Type.Optional(Nullable(Id)),
    approvedPayers: Type.Array(Id, { maxItems: 100, uniqueItems: true }),
    perActionApprovalThresholdUsd: Type.Optional(Nullable(Usd)),
    sessionLimitUsd: Type.Optional(Nullable(Usd)),
    agentLimitUsd: Type.Optional(Nullable(Usd)),
    /** Keyed by category names: at most 200 characters each, checked by the service (config.ts). */
    categoryPolicies: Type.Optional(
      PatternRecord(NONEMPTY_NO_CONTROL_CHARS, CategoryPolicyBody, { maxProperties: 100 }),
    ),
    approvalWindowSeconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 86_400 })),
    agentWindow: Type.Optional(Window),
    categoryWindow: Type.Optional(Window),
  },
  { additionalProperties: false },
);

const ScopeBudgetSchema = Type.Object({
  limitUsd: Nullable(Type.Number()),
  spentUsd: Type.Number(),
  reservedUsd: Type.Number(),
  remainingUsd: Nullable(Type.Number()),
});

const BudgetSchema = Type.Object({
  currency: Type.Literal('USD'),
  asOf: Type.String(),
  source: Type.Literal('ledger'),
  session: Type.Optional(ScopeBudgetSchema),
  agent: Type.Optional(ScopeBudgetSchema),
  category: Type.Optional(ScopeBudgetSchema),
});

const AuthoritySchema = OneOf(['organization', 'organization+project', 'none']);

export const AuthorizationSchema = Type.Object({
  actionId: Type.String(),
  decision: OneOf(['allow', 'deny', 'require_approval']),
  reasonCode: Type.String(),
  message: Type.String(),
  authority: AuthoritySchema,
  payer: Nullable(Type.String()),
  quotedSpendUsd: Type.Number(),
  budget: BudgetSchema,
  approvalId: Type.Optional(Type.String()),
  reservationExpiresAt: Type.Optional(Type.String()),
  provisional: Type.Optional(Type.Literal(true)),
});

export const CommitSchema = Type.Object({
  actionId: Type.String(),
  status: Type.Literal('committed'),
  authority: AuthoritySchema,
  category: Type.String(),
  payer: Nullable(Type.String()),
  quotedSpendUsd: Type.Number(),
  actualSpendUsd: Type.Number(),
  overrunUsd: Type.Number(),
  approvalId: Nullable(Type.String()),
  reasonCode: Type.Literal('economic_committed'),
  message: Type.String(),
  budget: BudgetSchema,
});

export const StatusSchema = Type.Object({
  enabled: Type.Boolean(),
  authority: AuthoritySchema,
  healthy: Type.Boolean(),
  pendingApprovals: Type.Array(Type.String()),
  budget: Nullable(BudgetSchema),
});

const ConfigViewSchema = Type.Object({
  defaultPayer: Nullable(Type.String()),
  approvedPayers: Type.Array(Type.String()),
  perActionApprovalThresholdUsd: Nullable(Type.Number()),
  sessionLimitUsd: Nullable(Type.Number()),
  agentLimitUsd: Nullable(Type.Number()),
  categoryPolicies: Type.Record(
    Type.String(),
    Type.Object({ limitUsd: Nullable(Type.Number()), approvalThresholdUsd: Nullable(Type.Number()) }),
  ),
  approvalWindowSeconds: Type.Number(),
  agentWindow: Type.String(),
  categoryWindow: Type.String(),
});

export const ConfigSchema = Type.Object({
  scope: OneOf(['organization', 'project']),
  projectId: Nullable(Type.String()),
  config: Nullable(ConfigViewSchema),
  updatedAt: Nullable(Type.String()),
  effective: Nullable(ConfigViewSchema),
  authority: AuthoritySchema,
});
