import {
  FormatRegistry,
  Kind,
  type ObjectOptions,
  type TSchema,
  type TUnsafe,
  Type,
} from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import {
  DefaultErrorFunction,
  type ErrorFunctionParameter,
  SetErrorFunction,
  ValueErrorType,
} from '@sinclair/typebox/errors';
import { Value } from '@sinclair/typebox/value';
import { codePointLength, wellFormed } from '@svc/policy-engine';
import type { FastifySchemaCompiler } from 'fastify';
import { isUuid, isUuidAnyCase } from './ids.js';

// TypeBox's compiler knows no formats by itself; these are the ones the API uses.
if (!FormatRegistry.Has('uuid')) FormatRegistry.Set('uuid', isUuid);
if (!FormatRegistry.Has('date-time')) FormatRegistry.Set('date-time', (v) => !Number.isNaN(Date.parse(v)));

/*
 * String lengths count characters (Unicode code points), as JSON Schema's minLength/maxLength and the
 * spec's "1-100 chars" do; TypeBox's compiler counts UTF-16 code units, so a name of 100 emoji (200
 * units) would be refused at 51. Every schema the service validates with goes through countCharacters
 * before it is compiled (compileSchema, validatorCompiler); the schemas themselves, and so the API
 * document, keep the bounds as written.
 */

/** The length bounds (and format) a string schema was written with, on its compiled copy. */
const CHAR_BOUNDS = Symbol('svc.charBounds');
interface CharBounds {
  minLength: number | undefined;
  maxLength: number | undefined;
  format: string | undefined;
}

/**
 * The format that checks the bounds in characters. The compiled copy keeps its bounds in UTF-16
 * units where they are implied (N characters are at most 2N units), so the usual string (units
 * within the limit) is accepted without counting, and a huge one is refused before any pattern runs.
 */
function charsFormat({ minLength, maxLength, format }: CharBounds): string {
  const name = `svc-chars:${minLength ?? 0}-${maxLength ?? ''}${format ? `:${format}` : ''}`;
  if (FormatRegistry.Has(name)) return name;
  const min = minLength ?? 0;
  const max = maxLength ?? Number.POSITIVE_INFINITY;
  FormatRegistry.Set(
    name,
    (v) =>
      (v.length <= max || codePointLength(v) <= max) &&
      (v.length >= 2 * min || codePointLength(v) >= min) &&
      (format === undefined || (FormatRegistry.Get(format)?.(v) ?? false)),
  );
  return name;
}

function rewriteLengths(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(rewriteLengths);
  if (typeof node !== 'object' || node === null) return node;
  const source = node as Record<PropertyKey, unknown>;
  const copy: Record<PropertyKey, unknown> = {};
  for (const key of Reflect.ownKeys(source)) copy[key] = rewriteLengths(source[key]);
  if (copy[CHAR_BOUNDS] !== undefined) return copy; // rewritten already
  const { minLength, maxLength, format } = copy;
  const bounded = typeof maxLength === 'number' || (typeof minLength === 'number' && minLength > 1);
  if (copy[Kind] !== 'String' || !bounded) return copy;
  const bounds: CharBounds = {
    minLength: typeof minLength === 'number' ? minLength : undefined,
    maxLength: typeof maxLength === 'number' ? maxLength : undefined,
    format: typeof format === 'string' ? format : undefined,
  };
  // minLength stays as written: N characters are at least N units.
  if (bounds.maxLength !== undefined) copy.maxLength = 2 * bounds.maxLength;
  copy.format = charsFormat(bounds);
  copy[CHAR_BOUNDS] = bounds;
  return copy;
}

/** A copy of `schema` whose string length bounds count characters when compiled (see above). */
export function countCharacters<T extends TSchema>(schema: T): T {
  return rewriteLengths(schema) as T;
}

/** TypeCompiler.Compile, with string lengths counted in characters: for schemas checked outside a route. */
export function compileSchema<T extends TSchema>(schema: T): TypeCheck<T> {
  return TypeCompiler.Compile(countCharacters(schema));
}

/**
 * The routes' validator (app.setValidatorCompiler): @fastify/type-provider-typebox's, with lengths
 * in characters. Bodies are never coerced; querystring, params and headers are converted (`limit=10`).
 */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  const compiled = countCharacters(schema);
  const check = TypeCompiler.Compile(compiled);
  return (value) => {
    const converted = httpPart === 'body' ? value : Value.Convert(compiled, value);
    if (check.Check(converted)) return { value: converted };
    const error = [...check.Errors(converted)].map((e) => ({
      keyword: ValueErrorType[e.type],
      instancePath: e.path,
      schemaPath: '',
      params: {},
      message: e.message,
    }));
    return { error };
  };
};

/** The values a closed set allows (a union of literals, OneOf, with null), or null for any other schema. */
function allowedValues(schema: TSchema): unknown[] | null {
  if (schema[Kind] === 'Literal') return [schema.const];
  if (schema[Kind] === 'Null') return [null];
  if (schema[Kind] === 'String') return Array.isArray(schema.enum) ? schema.enum : null;
  if (schema[Kind] !== 'Union' || !Array.isArray(schema.anyOf)) return null;
  const values: unknown[] = [];
  for (const variant of schema.anyOf as TSchema[]) {
    const some = allowedValues(variant);
    if (some === null) return null;
    values.push(...some);
  }
  return values;
}

/**
 * TypeBox's messages, except: a closed set names its values ("must be one of: allow, deny", not
 * "Expected union value"), and a length bound counted in characters reports the bound as written.
 */
function errorMessage(e: ErrorFunctionParameter): string {
  const bounds = (e.schema as { [CHAR_BOUNDS]?: CharBounds })[CHAR_BOUNDS];
  if (bounds && typeof e.value === 'string') {
    const n = codePointLength(e.value);
    if (bounds.maxLength !== undefined && n > bounds.maxLength) {
      const schema = { ...e.schema, maxLength: bounds.maxLength };
      return DefaultErrorFunction({ ...e, errorType: ValueErrorType.StringMaxLength, schema });
    }
    if (bounds.minLength !== undefined && n < bounds.minLength) {
      const schema = { ...e.schema, minLength: bounds.minLength };
      return DefaultErrorFunction({ ...e, errorType: ValueErrorType.StringMinLength, schema });
    }
    if (e.errorType === ValueErrorType.StringFormat) {
      return DefaultErrorFunction({ ...e, schema: { ...e.schema, format: bounds.format } });
    }
  }
  const uuid =
    (e.errorType === ValueErrorType.StringFormat && (e.schema as { format?: unknown }).format === 'uuid') ||
    (e.errorType === ValueErrorType.StringPattern &&
      (e.schema as { pattern?: unknown }).pattern === UUID_PATTERN);
  if (uuid) {
    return typeof e.value === 'string' && isUuidAnyCase(e.value)
      ? 'must be written in lower case, as the API writes ids'
      : 'must be a UUID';
  }
  if (e.errorType === ValueErrorType.ObjectAdditionalProperties) {
    const names = Object.keys((e.schema as { patternProperties?: object }).patternProperties ?? {});
    if (names.length === 1) {
      return `is not an allowed name: ${PATTERN_MESSAGES.get(names[0] as string) ?? `names match ${names[0]}`}`;
    }
  }
  const closed =
    e.errorType === ValueErrorType.Union ||
    e.errorType === ValueErrorType.StringPattern ||
    e.errorType === ValueErrorType.String
      ? allowedValues(e.schema)
      : null;
  if (closed !== null && closed.length > 0) {
    const shown = closed.map((v) => (typeof v === 'string' ? v : JSON.stringify(v)));
    return `must be one of: ${shown.join(', ')}`;
  }
  if (e.errorType === ValueErrorType.StringPattern) {
    const said = PATTERN_MESSAGES.get((e.schema as { pattern?: unknown }).pattern as string);
    if (said) return said;
  }
  if (e.errorType === ValueErrorType.Union && e.value !== null) {
    const said = nullableMismatch(e.schema);
    if (said) return said(e.value);
  }
  return DefaultErrorFunction(e);
}

/**
 * For a value that is not null, a nullable schema (a union of one schema and null) says what that
 * schema finds wrong, and where inside the value, instead of TypeBox's "Expected union value".
 */
function nullableMismatch(schema: TSchema): ((value: unknown) => string) | null {
  const variants = schema.anyOf as TSchema[] | undefined;
  if (!Array.isArray(variants) || variants.length !== 2) return null;
  const other = variants.filter((v) => v[Kind] !== 'Null');
  if (other.length !== 1) return null;
  const [only] = other as [TSchema];
  return (value) => {
    const inner = Value.Errors(only, value).First();
    if (!inner) return 'Expected union value';
    return inner.path === '' ? `${inner.message} (or null)` : `at ${inner.path}: ${inner.message}`;
  };
}
SetErrorFunction(errorMessage);

/** No C0 control characters (U+0000-U+001F): PostgreSQL rejects NUL in text, and none belong in a name. */
export const NO_CONTROL_CHARS = '^[^\\u0000-\\u001f]*$';
const NO_CONTROL_CHARS_RE = new RegExp(NO_CONTROL_CHARS);
/** As NO_CONTROL_CHARS, and not empty: for names that are property names, where minLength cannot apply. */
export const NONEMPTY_NO_CONTROL_CHARS = '^[^\\u0000-\\u001f]+$';

/**
 * A name the API addresses in a path (`/v1/policies/:toolName`): no control characters, and not `.`
 * or `..`. URL parsers remove those two segments from a path, percent-encoded or not (RFC 3986
 * §5.2.4, the WHATWG URL standard), so no browser or HTTP client library could read, change or
 * delete what they name. (No lookahead: the fuzz test generates strings from these patterns.)
 */
export const PATH_NAME =
  '^([^\\u0000-\\u001f.]|\\.[^\\u0000-\\u001f.]|\\.\\.[^\\u0000-\\u001f])[^\\u0000-\\u001f]*$';

/** An HTTP header name (RFC 9110 token), at most 100 characters. */
export const HEADER_NAME = "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$";

/** What a failed pattern says, for the patterns shared by names (TypeBox would show the expression). */
const PATTERN_MESSAGES = new Map([
  [HEADER_NAME, "must be an HTTP header name: 1-100 letters, digits or !#$%&'*+.^_`|~-"],
  [NO_CONTROL_CHARS, 'must not contain control characters (U+0000-U+001F)'],
  [NONEMPTY_NO_CONTROL_CHARS, 'must not be empty or contain control characters (U+0000-U+001F)'],
  [
    PATH_NAME,
    'must not contain control characters (U+0000-U+001F) and must not be "." or ".." (a URL path cannot name those)',
  ],
]);

/**
 * A person's id as the service stores it (a token's `sub`, a provider's user claim): 1-200
 * characters, not only spaces, no control characters (U+0000 would not even reach PostgreSQL), and
 * well-formed Unicode: a lone surrogate is stored as U+FFFD, so "\ud800" and "\udfff" would both
 * name the same person.
 */
export function isUserId(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    wellFormed(value) &&
    value.trim() !== '' &&
    codePointLength(value) <= 200 &&
    NO_CONTROL_CHARS_RE.test(value)
  );
}
export const Name = Type.String({ minLength: 1, maxLength: 100, pattern: NO_CONTROL_CHARS });
export const Slug = Type.String({ minLength: 1, maxLength: 100, pattern: '^[a-z0-9-]+$' });
/** Ids as the service writes them; the pattern tells readers of /openapi.json that case counts. */
export const UUID_PATTERN = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
export const Uuid = Type.String({ format: 'uuid', pattern: UUID_PATTERN });
export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) });
export const Success = Type.Object({ success: Type.Literal(true) });

/**
 * `limit` (1 to `maxLimit`, default 50) and `offset` of a paged list as the API document describes
 * them; the routes take them as strings and check these bounds themselves.
 */
export const documentedPage = (maxLimit: number) => ({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: maxLimit, default: 50 })),
  offset: Type.Optional(Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, default: 0 })),
});

/** The page a list answered (GET /v1/decisions, GET /v1/approvals/resolved): `hasMore` when rows follow it. */
export const Pagination = Type.Object({
  total: Type.Integer(),
  limit: Type.Integer(),
  offset: Type.Integer(),
  hasMore: Type.Boolean(),
});

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

/**
 * An object whose property names match `pattern`, each value checked against `value`. TypeBox's
 * Record with a patterned key checks only the properties whose names match and lets any other
 * through, its value unchecked; this one refuses them ("is not an allowed name", at their path).
 */
export const PatternRecord = <V extends TSchema>(pattern: string, value: V, options: ObjectOptions = {}) =>
  Type.Record(Type.String({ pattern }), value, { ...options, additionalProperties: false });

/** One failed constraint of a decision, as validate answers it and the decision log stores it. */
export const FailedConstraintSchema = Type.Object({
  parameter: Type.String(),
  constraint_type: Type.String(),
  expected: Type.Unknown(),
  actual: Type.Unknown(),
  message: Type.String(),
});

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A closed set of strings, checked with one pattern; its validation error names the allowed values. */
export function OneOf<const T extends readonly string[]>(values: T): TUnsafe<T[number]> {
  return Type.String({
    enum: [...values],
    pattern: `^(${values.map(escapeRegex).join('|')})$`,
  }) as unknown as TUnsafe<T[number]>;
}
