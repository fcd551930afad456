import { Type } from '@sinclair/typebox';
import { Uuid } from '../../lib/schemas.js';

export const TurnBody = Type.Object(
  {
    message: Type.String({ minLength: 1, maxLength: 20_000 }),
    mode: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('chat'), Type.Literal('compile')])),
    surface: Type.Optional(Type.String({ minLength: 1, maxLength: 50 })),
    conversationId: Type.Optional(Uuid),
  },
  { additionalProperties: false },
);

export const VerificationParams = Type.Object({ id: Uuid });
export const LinkQuery = Type.Object({ token: Type.Optional(Type.String({ maxLength: 200 })) });
