const hasOwn = Object.hasOwn;

/**
 * Builds a reader for one argument name: the exact top-level key first; if that is absent and the name
 * contains dots, the name is read as a path into nested objects (`payment.amount`; array elements by
 * index, `items.0.sku`). Only own properties count, so `constructor` or `__proto__` never resolve to
 * something inherited. Returns undefined when absent.
 */
export function argumentReader(name: string): (args: Record<string, unknown>) => unknown {
  if (!name.includes('.')) {
    return (args) => (hasOwn(args, name) ? args[name] : undefined);
  }
  const parts = name.split('.');
  return (args) => {
    if (hasOwn(args, name)) {
      const direct = args[name];
      if (direct !== undefined) return direct;
    }
    let current: unknown = args;
    for (const part of parts) {
      if (current === null || typeof current !== 'object' || !hasOwn(current, part)) return undefined;
      current = (current as Record<string, unknown>)[part];
    }
    return current;
  };
}

/** JSON-ish type name used in `type` failures: string, number, boolean, array, object, null, ... */
export function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number' && !Number.isFinite(value)) return 'non-finite number';
  return typeof value;
}
