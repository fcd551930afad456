import { FormatRegistry, type TSchema, Type } from '@sinclair/typebox';
import { isUuid } from './ids.js';

// TypeBox's compiler knows no formats by itself; these are the ones the API uses.
if (!FormatRegistry.Has('uuid')) FormatRegistry.Set('uuid', isUuid);
if (!FormatRegistry.Has('date-time')) FormatRegistry.Set('date-time', (v) => !Number.isNaN(Date.parse(v)));

export const Name = Type.String({ minLength: 1, maxLength: 100 });
export const Slug = Type.String({ minLength: 1, maxLength: 100, pattern: '^[a-z0-9-]+$' });
export const Uuid = Type.String({ format: 'uuid' });
export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) });
export const Success = Type.Object({ success: Type.Literal(true) });

export const ErrorEnvelope = Type.Object({
  error: Type.Object({ code: Type.String(), message: Type.String() }),
});
