import { describe, expect, it } from 'vitest';
import { UpstreamDirectory } from './directory.js';
import type { UpstreamRow } from './repository.js';

describe('UpstreamDirectory', () => {
  it('keeps hits for a second, never keeps misses, and forgets an organization on change', async () => {
    let now = 0;
    let queries = 0;
    const rows = new Map<string, UpstreamRow>();
    const repo = {
      getBySlug: async (org: string, slug: string) => {
        queries++;
        return rows.get(`${org}/${slug}`);
      },
    };
    const dir = new UpstreamDirectory(repo, () => now);
    expect(await dir.get('o', 's')).toBeUndefined();
    rows.set('o/s', { id: 'u1', slug: 's' } as UpstreamRow);
    expect((await dir.get('o', 's'))?.id).toBe('u1');
    expect((await dir.get('o', 's'))?.id).toBe('u1');
    expect(queries).toBe(2);
    rows.set('o/s', { id: 'u2', slug: 's' } as UpstreamRow);
    now = 999;
    expect((await dir.get('o', 's'))?.id).toBe('u1');
    now = 1000;
    expect((await dir.get('o', 's'))?.id).toBe('u2');
    rows.delete('o/s');
    dir.forget('o');
    expect(await dir.get('o', 's')).toBeUndefined();
  });
});
