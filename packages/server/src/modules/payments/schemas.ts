import { Type } from '@sinclair/typebox';

const Id = Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\x00-\\x1f\\x7f]+$' });
const Decimal = Type.String({ minLength: 1, maxLength: 32 });
const Rail = Type.String({ pattern: '^[a-z0-9_-]{1,32}$' });
const Hash = Type.String({ pattern: '^sha256:[0-9a-f]{64}$' });
const UsdOrNull = Type.Union([Decimal, Type.Null()]);

export const PackParams = Type.Object({ packId: Type.String({ pattern: '^[A-Za-z0-9._-]{1,100}$' }) });
export const PackQuery = Type.Object(
  { version: Type.Optional(Type.Integer({ minimum: 1 })) },
  { additionalProperties: false },
);
export const IdParams = Type.Object({ id: Id });

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
    entity_id: Id,
    agent_id: Id,
    pack_id: Type.String({ pattern: '^[A-Za-z0-9._-]{1,100}$' }),
    pack_version: Type.Optional(Type.Integer({ minimum: 1 })),
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
