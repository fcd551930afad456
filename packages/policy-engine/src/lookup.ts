const hasOwn = Object.hasOwn;

/**
 * Builds a reader for a dotted name read as a path into nested objects (`payment.amount`; array
 * elements by index, `items.0.sku`). Only own properties count, so `constructor` or `__proto__` never
 * resolve to something inherited. Returns undefined when absent.
 */
function pathReader(name: string): (args: Record<string, unknown>) => unknown {
  const parts = name.split('.');
  return (args) => {
    let current: unknown = args;
    for (const part of parts) {
      if (current === null || typeof current !== 'object' || !hasOwn(current, part)) return undefined;
      current = (current as Record<string, unknown>)[part];
    }
    return current;
  };
}

/**
 * The same scalar (string, number, boolean, null). Objects and arrays never count as the same, even
 * the same object twice: JSON has no shared references, so the service, which reads the call parsed
 * from JSON, always meets two objects there, and an SDK deciding on the caller's own objects (where
 * one object may sit under both names) must read them as the service does.
 */
const sameScalar = (a: unknown, b: unknown): boolean =>
  Object.is(a, b) && (typeof a !== 'object' || a === null);

/**
 * Builds a reader for every value one argument name refers to: the exact top-level key and, when the
 * name contains dots, the nested path too. A call may carry both (`{"payment.amount": 5, "payment":
 * {"amount": 500}}`) and the tool may read either, so checks apply to each reading that is present.
 * Returns the readings that are present, without repeating one scalar value (an object or array is
 * read twice, see sameScalar); an empty list when absent.
 */
export function argumentReadings(name: string): (args: Record<string, unknown>) => unknown[] {
  if (!name.includes('.')) {
    return (args) => (hasOwn(args, name) && args[name] !== undefined ? [args[name]] : []);
  }
  const readPath = pathReader(name);
  return (args) => {
    const direct = hasOwn(args, name) ? args[name] : undefined;
    const nested = readPath(args);
    if (direct === undefined) return nested === undefined ? [] : [nested];
    return nested === undefined || sameScalar(nested, direct) ? [direct] : [direct, nested];
  };
}

/** JSON-ish type name used in `type` failures: string, number, boolean, array, object, null, ... */
export function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number' && !Number.isFinite(value)) return 'non-finite number';
  return typeof value;
}
