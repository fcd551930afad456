const MAX_SHOWN = 80;

/** A short, safe rendering of a value for messages (long strings are cut). */
export function show(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(cut(value));
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function' || typeof value === 'symbol') return typeof value;
  try {
    return cut(JSON.stringify(value) ?? String(value));
  } catch {
    return 'an unprintable value';
  }
}

function cut(text: string): string {
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}…` : text;
}

/** `a, b, c` with at most 10 items shown. */
export function showList(values: readonly string[]): string {
  const shown = values.slice(0, 10).map((v) => JSON.stringify(cut(v)));
  if (values.length > 10) shown.push(`and ${values.length - 10} more`);
  return shown.join(', ');
}

export function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}
