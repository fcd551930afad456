import fc from 'fast-check';

/** The subset of JSON Schema (as TypeBox writes it) the routes use. */
export interface JsonSchema {
  type?: string;
  const?: unknown;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  allOf?: JsonSchema[];
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  patternProperties?: Record<string, JsonSchema>;
}

const anyJson = fc.jsonValue({ maxDepth: 2 });

/** Values to mix in for an object member by its name (real ids for `projectId`…), or undefined. */
export type Hint = (key: string) => fc.Arbitrary<unknown> | undefined;
const noHint: Hint = () => undefined;

/**
 * Values that a schema accepts, most of the time: strings honour lengths, enums, formats and (where
 * fast-check can) patterns; numbers their bounds; objects their required keys. Small on purpose: the
 * hostile part is added by the mutations, and small values keep a run fast.
 */
export function fromSchema(
  schema: JsonSchema | undefined,
  depth = 0,
  hint: Hint = noHint,
): fc.Arbitrary<unknown> {
  if (!schema || typeof schema !== 'object') return anyJson;
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return fc.constantFrom(...schema.enum);
  const union = schema.anyOf ?? schema.oneOf;
  if (union) return fc.oneof(...union.map((s) => fromSchema(s, depth, hint)));
  if (schema.allOf?.[0]) return fromSchema(schema.allOf[0], depth, hint);
  switch (schema.type) {
    case 'string':
      return stringOf(schema);
    case 'integer':
      return fc.integer({
        min: Math.max(schema.minimum ?? -1_000_000, -1_000_000),
        max: Math.min(schema.maximum ?? 1_000_000, 1_000_000),
      });
    case 'number':
      return fc.double({
        min: Math.max(schema.minimum ?? schema.exclusiveMinimum ?? -1e9, -1e9),
        max: Math.min(schema.maximum ?? schema.exclusiveMaximum ?? 1e9, 1e9),
        noNaN: true,
        noDefaultInfinity: true,
      });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      if (depth > 4) return fc.constant([]);
      return fc.array(fromSchema(schema.items, depth + 1, hint), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3)),
      });
    case 'object':
      return objectOf(schema, depth, hint);
  }
  return anyJson;
}

function stringOf(schema: JsonSchema): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = Math.max(min, Math.min(schema.maxLength ?? 24, 24));
  if (schema.format === 'uuid') return fc.uuid();
  if (schema.format === 'date-time') {
    return fc
      .date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true })
      .map((d) => d.toISOString());
  }
  if (schema.format === 'date') {
    return fc
      .date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true })
      .map((d) => d.toISOString().slice(0, 10));
  }
  const plain = fc.string({ minLength: min, maxLength: max, unit: 'grapheme-composite' });
  if (!schema.pattern) return plain;
  let pattern: RegExp;
  try {
    pattern = new RegExp(schema.pattern);
  } catch {
    return plain;
  }
  // No filter (it could reject forever, e.g. a 71-character hash cut to 24): a string that no longer
  // matches once cut is sent whole.
  return fc.stringMatching(pattern).map((s) => {
    const cut = s.slice(0, max);
    return cut.length >= min && pattern.test(cut) ? cut : s;
  });
}

function objectOf(schema: JsonSchema, depth: number, hint: Hint): fc.Arbitrary<unknown> {
  if (depth > 4) return fc.constant({});
  if (schema.properties) {
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [key, sub] of Object.entries(schema.properties)) {
      const own = fromSchema(sub, depth + 1, hint);
      const mixed = hint(key);
      model[key] = mixed ? fc.oneof(own, mixed) : own;
    }
    return fc.record(model, { requiredKeys: (schema.required ?? []).filter((k) => k in model) });
  }
  const values = schema.patternProperties ? Object.values(schema.patternProperties)[0] : undefined;
  return fc.dictionary(fc.string({ maxLength: 8 }), fromSchema(values, depth + 1, hint), { maxKeys: 4 });
}
