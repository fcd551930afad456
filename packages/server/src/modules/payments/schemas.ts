import { Type } from '@sinclair/typebox';
import { VersionNumber } from '../../lib/schemas.js';

const Id = Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\x00-\\x1f\\x7f]+$' });
/**
 * An entity id (the payer entity caps count for): an Id that is also no other id written differently
 * to the eye; the service refuses the rest (entity-id.ts), with its own message.
 */
export const EntityId = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^[^\\x00-\\x1f\\x7f]+$',
  description:
    'Compared exactly (case-sensitive); entity caps count the spend of this exact id. No white space at either end, no control or format characters (U+200B, U+FEFF, bidi marks…), NFC.',
});
const Decimal = Type.String({ minLength: 1, maxLength: 32 });
const Rail = Type.String({ pattern: '^[a-z0-9_-]{1,32}$' });
const Hash = Type.String({ pattern: '^sha256:[0-9a-f]{64}$' });
const UsdOrNull = Type.Union([Decimal, Type.Null()]);

export const PackParams = Type.Object({ packId: Type.String({ pattern: '^[A-Za-z0-9._-]{1,100}$' }) });
export const PackQuery = Type.Object(
  // A string, as every integer query of the API: the query parser's own conversion reads "1e308" as 1.
  { version: Type.Optional(Type.String({ pattern: '^[0-9]{1,10}$' })) },
  { additionalProperties: false },
);
export const IdParams = Type.Object({ id: Id });

const StateName = Type.String({ pattern: '^[a-z][a-z0-9_]{0,31}$' });
/** A pack's own workflow edge map (see workflows.ts). */
const WorkflowMapBody = Type.Object(
  {
    initial: Type.Optional(StateName),
    edges: Type.Record(StateName, Type.Array(StateName, { maxItems: 32 }), { maxProperties: 32 }),
    consume_from: Type.Optional(StateName),
    consume_to: Type.Optional(StateName),
    settle_to: Type.Optional(Type.Union([StateName, Type.Null()])),
    person_states: Type.Optional(Type.Array(StateName, { maxItems: 32 })),
  },
  { additionalProperties: false },
);

export const PackBody = Type.Object(
  {
    entity_caps: Type.Optional(
      Type.Object(
        {
          usd_24h: Type.Optional(UsdOrNull),
          usd_7d: Type.Optional(UsdOrNull),
          usd_30d: Type.Optional(UsdOrNull),
        },
        { additionalProperties: false },
      ),
    ),
    approval_threshold_usd: Type.Optional(UsdOrNull),
    dual_control_threshold_usd: Type.Optional(UsdOrNull),
    allowed_rails: Type.Array(Rail, { minItems: 1, maxItems: 16 }),
    invoice_required: Type.Optional(Type.Boolean()),
    quarantine_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 90 * 86_400 })),
    max_ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 30 * 86_400 })),
    workflow: Type.Optional(WorkflowMapBody),
    conditions: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' }),
            expression: Type.String({ minLength: 1, maxLength: 4000 }),
          },
          { additionalProperties: false },
        ),
        { maxItems: 32 },
      ),
    ),
  },
  { additionalProperties: false },
);

const Optional = (s: ReturnType<typeof Type.String>) => Type.Optional(s);
export const BeneficiaryDetails = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    account_number: Optional(Type.String({ maxLength: 64 })),
    routing_number: Optional(Type.String({ maxLength: 64 })),
    wallet_address: Optional(Type.String({ maxLength: 128 })),
    country: Optional(Type.String({ maxLength: 2 })),
  },
  { additionalProperties: false },
);

export const PayeeBody = Type.Object({ details: BeneficiaryDetails }, { additionalProperties: false });

const Money = Type.Object(
  { currency: Type.String({ pattern: '^[A-Z]{3,5}$' }), amount: Decimal },
  { additionalProperties: false },
);

export const MintBody = Type.Object(
  {
    entity_id: EntityId,
    agent_id: Id,
    pack_id: Type.String({ pattern: '^[A-Za-z0-9._-]{1,100}$' }),
    pack_version: Type.Optional(VersionNumber),
    rails: Type.Array(Rail, { minItems: 1, maxItems: 16 }),
    beneficiary: Type.Union([
      Type.Object({ payee_id: Id }, { additionalProperties: false }),
      Type.Object({ details: BeneficiaryDetails }, { additionalProperties: false }),
    ]),
    amount_ceiling: Money,
    ttl_seconds: Type.Integer({ minimum: 1, maximum: 30 * 86_400 }),
    invoice_hash: Type.Optional(Hash),
    workflow_id: Type.Optional(Id),
    approval_ref: Type.Optional(Id),
  },
  { additionalProperties: false },
);

export const ConsumeBody = Type.Object(
  {
    capsule: Type.String({ minLength: 1, maxLength: 16_384 }),
    amount: Decimal,
    currency: Type.String({ pattern: '^[A-Z]{3,5}$' }),
    rail: Rail,
    beneficiary: BeneficiaryDetails,
    invoice_hash: Type.Optional(Hash),
  },
  { additionalProperties: false },
);

/* Answers (model.ts). Amounts are decimal strings, as in the bodies. */

const Timestamp = Type.String({ description: 'ISO 8601' });
const StringOrNull = Type.Union([Type.String(), Type.Null()]);

export const PackAnswerSchema = Type.Object({
  pack_id: Type.String(),
  version: Type.Integer(),
  sha256: Type.String({ description: 'sha256 of the pack content: what capsules name as policy_sha256' }),
  created_at: Timestamp,
  entity_caps: Type.Object({ usd_24h: StringOrNull, usd_7d: StringOrNull, usd_30d: StringOrNull }),
  approval_threshold_usd: StringOrNull,
  dual_control_threshold_usd: StringOrNull,
  allowed_rails: Type.Array(Type.String()),
  invoice_required: Type.Boolean(),
  quarantine_seconds: Type.Integer(),
  max_ttl_seconds: Type.Integer(),
  conditions: Type.Array(Type.Object({ name: Type.String(), expression: Type.String() })),
  workflow: Type.Optional(
    Type.Unknown({ description: "The pack's own workflow edge map; absent: the default" }),
  ),
});

export const PayeeAnswerSchema = Type.Object({
  id: Type.String(),
  beneficiary_hash: Type.String(),
  details: Type.Record(Type.String(), Type.String()),
  held: Type.Boolean(),
  quarantine: Type.Object({ lifted_at: StringOrNull, lifted_by: StringOrNull }),
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const CapsuleAnswerSchema = Type.Object({
  id: Type.String(),
  capsule: Type.String({ description: 'The signed capsule (compact JWS)' }),
  status: Type.String({ enum: ['active', 'consumed', 'revoked'] }),
  payee_id: Type.String(),
  payload: Type.Record(Type.String(), Type.Unknown(), { description: 'The signed payload, decoded' }),
  consumption: Type.Union([
    Type.Object({
      amount: Type.String(),
      currency: Type.String(),
      rail: Type.String(),
      invoice_hash: StringOrNull,
      consumed_at: Timestamp,
      ledger_entry_id: Type.String(),
      payment: Type.Optional(
        Type.Unknown({ description: 'How the payment was made (rail, provider, reference), once routed' }),
      ),
    }),
    Type.Null(),
  ]),
  receipt_id: StringOrNull,
  created_at: Timestamp,
  updated_at: Timestamp,
});

/** GET /v1/gateway/schemas/capsule.json: a JSON Schema document. */
export const CapsuleJsonSchema = Type.Object(
  {},
  { additionalProperties: true, description: 'The JSON Schema of a capsule payload' },
);

/* Answers of invoices, workflows and providers (flow-model.ts). */

const Terms = Type.Object({ currency: Type.String(), amount: Type.String() });

export const InvoiceAnswerSchema = Type.Object({
  id: Type.String(),
  invoice_hash: Type.String({ description: 'sha256 of the canonical terms: what a capsule binds to' }),
  format: Type.String({ enum: ['json', 'ubl'] }),
  status: Type.String({ enum: ['parsed', 'parse_failed'] }),
  invoice_number: StringOrNull,
  issue_date: StringOrNull,
  due_date: StringOrNull,
  payee: Type.Union([Type.Record(Type.String(), Type.String()), Type.Null()], {
    description: "The payee's details, normalized as beneficiaries are; null when the document did not parse",
  }),
  beneficiary_hash: StringOrNull,
  amount: Type.Union([Terms, Type.Null()]),
  parse_error: StringOrNull,
  capsule_id: Type.Union([Type.String(), Type.Null()], { description: 'The capsule that paid it' }),
  consumed_at: Type.Union([Timestamp, Type.Null()]),
  created_at: Timestamp,
});

const WorkflowMapSchema = Type.Object({
  initial: Type.String(),
  edges: Type.Record(Type.String(), Type.Array(Type.String()), {
    description: 'The legal next states of each state',
  }),
  consume_from: Type.String({ description: 'The state a bound capsule consumes in' }),
  consume_to: Type.String({ description: 'The state the consume moves the workflow to' }),
  settle_to: Type.Union([Type.String(), Type.Null()], {
    description: 'Where a payment settled at consume moves it next; null: it stays',
  }),
  person_states: Type.Array(Type.String(), { description: 'States only a person may move it into' }),
});

export const WorkflowAnswerSchema = Type.Object({
  entity_id: Type.String(),
  workflow_id: Type.String(),
  pack_id: StringOrNull,
  state: Type.String(),
  next_states: Type.Array(Type.String()),
  capsule_id: StringOrNull,
  map: WorkflowMapSchema,
  history: Type.Array(
    Type.Object({
      from: StringOrNull,
      to: Type.String(),
      at: Timestamp,
      by: Type.String({ description: 'Who moved it: `user:<id>`, `key:<id>` or `capsule:<id>`' }),
      reason: StringOrNull,
    }),
  ),
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const ProviderAnswerSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  rail: Type.String(),
  url: Type.String(),
  timeout_ms: Type.Integer(),
  enabled: Type.Boolean(),
  credentials: Type.Object(
    { configured: Type.Boolean(), names: Type.Array(Type.String()) },
    { description: 'Write-only: whether credentials are set and the header names they set, never values' },
  ),
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const ProviderListSchema = Type.Object({ data: Type.Array(ProviderAnswerSchema) });
