import { Type } from '@sinclair/typebox';
import { Name, Nullable, Slug } from '../../lib/schemas.js';

export const OrganizationSchema = Type.Object({
  _id: Type.String(),
  name: Type.String(),
  slug: Type.String(),
  ownerId: Type.String(),
  tier: Type.String(),
  billingPeriodStart: Nullable(Type.String()),
  rateLimitPerMinute: Nullable(Type.Integer()),
  createdAt: Type.String(),
  updatedAt: Nullable(Type.String()),
});

export const CreateOrganizationBody = Type.Object(
  { name: Name, slug: Slug },
  { additionalProperties: false },
);
export const UpdateOrganizationBody = Type.Object(
  { name: Type.Optional(Name), slug: Type.Optional(Slug) },
  { additionalProperties: false },
);
