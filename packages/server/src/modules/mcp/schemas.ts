import { type Static, type TUnsafe, Type } from '@sinclair/typebox';
import { Name, Nullable, Slug } from '../../lib/schemas.js';

/** A closed set of strings whose validation message lists the allowed values. */
function OneOf<const T extends readonly string[]>(values: T): TUnsafe<T[number]> {
  return Type.String({ enum: [...values], pattern: `^(${values.join('|')})$` }) as unknown as TUnsafe<
    T[number]
  >;
}

// mcp-stdio is accepted by the schema so that the service can refuse it with a clear reason.
const TransportIn = OneOf(['mcp-streamable-http', 'mcp-sse', 'mcp-stdio']);

const fields = {
  name: Name,
  slug: Slug,
  transport: TransportIn,
  url: Type.String({ minLength: 1, maxLength: 2048 }),
  timeoutMs: Type.Integer({ minimum: 100, maximum: 120_000 }),
  enabled: Type.Boolean(),
  // Names and values are checked in the service, where the message can say which header is wrong.
  headers: Type.Record(Type.String(), Type.String()),
  projectId: Nullable(Type.String({ minLength: 1, maxLength: 200 })),
  // The spec lists them among an upstream's fields; only an empty value (no process to start) is
  // taken, since the service runs no local processes (the service refuses any other).
  command: Nullable(Type.String({ maxLength: 2048 })),
  args: Nullable(Type.Array(Type.String({ maxLength: 2048 }), { maxItems: 100 })),
};

/** Shorthand for Type.Optional, shared by the MCP schemas. */
export const Opt = Type.Optional;

export const CreateUpstreamBody = Type.Object(
  {
    name: fields.name,
    slug: fields.slug,
    transport: Opt(fields.transport),
    url: Opt(fields.url),
    timeoutMs: Opt(fields.timeoutMs),
    enabled: Opt(fields.enabled),
    headers: Opt(fields.headers),
    projectId: Opt(fields.projectId),
    command: Opt(fields.command),
    args: Opt(fields.args),
  },
  { additionalProperties: false },
);

/**
 * The create body as the API document describes it: `url` is required. The service checks it (400
 * `body/url is required`) after the transport, so mcp-stdio keeps its own refusal; the route's schema
 * leaves it optional for that order.
 */
export const CreateUpstreamDocumented = Type.Object(
  { ...CreateUpstreamBody.properties, url: fields.url },
  { additionalProperties: false },
);

export const UpdateUpstreamBody = Type.Partial(Type.Object(fields), { additionalProperties: false });

export type CreateUpstreamInput = Static<typeof CreateUpstreamBody>;
export type UpdateUpstreamInput = Static<typeof UpdateUpstreamBody>;

export const UpstreamSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  slug: Type.String(),
  transport: Type.String(),
  url: Type.String(),
  timeoutMs: Type.Integer(),
  enabled: Type.Boolean(),
  projectId: Nullable(Type.String()),
  /** Write-only values: a response shows which headers are set, never their values. */
  headers: Type.Record(Type.String(), Type.Literal('***')),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const ListQuery = Type.Object({ projectId: Opt(Type.String({ minLength: 1, maxLength: 200 })) });

export const TestResult = Type.Object({
  ok: Type.Boolean(),
  status: Type.Integer(),
  latencyMs: Type.Number(),
  message: Type.String(),
});
