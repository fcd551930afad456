import { FormatRegistry, type TSchema, type TUnsafe, Type } from '@sinclair/typebox';
import { isUuid } from './ids.js';

// TypeBox's compiler knows no formats by itself; these are the ones the API uses.
if (!FormatRegistry.Has('uuid')) FormatRegistry.Set('uuid', isUuid);
if (!FormatRegistry.Has('date-time')) FormatRegistry.Set('date-time', (v) => !Number.isNaN(Date.parse(v)));

/** No C0 control characters (U+0000-U+001F): PostgreSQL rejects NUL in text, and none belong in a name. */
export const NO_CONTROL_CHARS = '^[^\\u0000-\\u001f]*$';
const NO_CONTROL_CHARS_RE = new RegExp(NO_CONTROL_CHARS);

/**
 * A person's id as the service stores it (a token's `sub`, a provider's user claim): 1-200
 * characters, not only spaces, no control characters (U+0000 would not even reach PostgreSQL).
 */
export function isUserId(value: unknown): value is string {
  return (
    typeof value === 'string' && value.trim() !== '' && value.length <= 200 && NO_CONTROL_CHARS_RE.test(value)
  );
}
export const Name = Type.String({ minLength: 1, maxLength: 100, pattern: NO_CONTROL_CHARS });
export const Slug = Type.String({ minLength: 1, maxLength: 100, pattern: '^[a-z0-9-]+$' });
export const Uuid = Type.String({ format: 'uuid' });
export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) });
export const Success = Type.Object({ success: Type.Literal(true) });

/** Marks a documented request body as optional in /openapi.json (see plugins/openapi.ts). */
export const OPTIONAL_BODY = 'x-optional-body';

/**
 * The body of an action that takes none, for `schema.documented.body` (documented, not validated):
 * none is expected, and a JSON body sent anyway is ignored.
 */
export const NoBody = Type.Object(
  {},
  {
    [OPTIONAL_BODY]: true,
    additionalProperties: false,
    description: 'None: this action takes no body (a JSON body sent is ignored).',
  },
);

/** A stored version number: at least 1 and within a 32-bit integer column (PostgreSQL `integer`). */
export const VersionNumber = Type.Integer({ minimum: 1, maximum: 2 ** 31 - 1 });

/** A JSON object with any members: tool arguments, call context. */
export const JsonObject = Type.Record(Type.String(), Type.Unknown());

/** One failed constraint of a decision, as validate answers it and the decision log stores it. */
export const FailedConstraintSchema = Type.Object({
  parameter: Type.String(),
  constraint_type: Type.String(),
  expected: Type.Unknown(),
  actual: Type.Unknown(),
  message: Type.String(),
});

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A closed set of strings; unlike a literal union, its validation error shows the allowed values. */
export function OneOf<const T extends readonly string[]>(values: T): TUnsafe<T[number]> {
  return Type.String({
    enum: [...values],
    pattern: `^(${values.map(escapeRegex).join('|')})$`,
  }) as unknown as TUnsafe<T[number]>;
}
