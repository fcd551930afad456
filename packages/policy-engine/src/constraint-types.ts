/**
 * Every value `FailedConstraint.constraint_type` can take. Shapes of `expected`/`actual` are documented
 * in README.md; keep the two in step.
 */
export const CONSTRAINT_TYPES = [
  'required',
  'not_null',
  'type',
  'range',
  'length',
  'items',
  'enum',
  'not_enum',
  'regex',
  'not_regex',
  'max_calls',
  'cumulative_limit',
  'mode',
  'unevaluable',
] as const;

export type ConstraintType = (typeof CONSTRAINT_TYPES)[number];
