import { describe, expect, it } from 'vitest';
import { derivedUuidv7, isUuid, isUuidAnyCase, uuidv7 } from './ids.js';

describe('derivedUuidv7', () => {
  const ms = Date.parse('2026-11-28T01:02:03.456Z');

  it('gives the same id for the same arguments, another for any other', () => {
    const id = derivedUuidv7(ms, 'org\nkey\nt', 0);
    expect(derivedUuidv7(ms, 'org\nkey\nt', 0)).toBe(id);
    const others = [
      derivedUuidv7(ms, 'org\nkey\nt', 1),
      derivedUuidv7(ms, 'org\nkey\nu', 0),
      derivedUuidv7(ms + 1, 'org\nkey\nt', 0),
    ];
    expect(new Set([id, ...others]).size).toBe(4);
  });

  it('is a UUID version 7 with its time and its index in order', () => {
    const ids = [0, 1, 255, 256, 499].map((i) => derivedUuidv7(ms, 'seed', i));
    for (const id of ids) {
      expect(isUuid(id)).toBe(true);
      expect(isUuid(id.toUpperCase())).toBe(false);
      expect(isUuidAnyCase(id.toUpperCase())).toBe(true);
      expect(id[14]).toBe('7');
      expect('89ab').toContain(id[19]);
      expect(Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(ms);
    }
    expect([...ids].sort()).toEqual(ids);
    expect(derivedUuidv7(ms, 'seed', 499).slice(15, 18)).toBe('1f3');
    // Sorted with drawn ids by time, as those are.
    expect(derivedUuidv7(ms - 1, 'seed', 0) < uuidv7(ms + 1)).toBe(true);
  });
});
