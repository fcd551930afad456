import { describe, expect, it } from 'vitest';
import { currentEntry, historyOrder, type VersionEntry } from './policyHistory.js';

const v = (
  version: number,
  createdAt: string,
  policyHash = `sha256:${version}-${createdAt}`,
): VersionEntry => ({
  version,
  policyHash,
  createdAt,
});

describe('the version history of a policy deleted and created again', () => {
  // Versions 1-5 of the first incarnation, then deleted; created again (version 1), then saved (2).
  const old = [1, 2, 3, 4, 5].map((n) => v(n, `2030-01-0${n}T00:00:00.000Z`));
  const live = [v(1, '2030-02-01T00:00:00.000Z'), v(2, '2030-02-02T00:00:00.000Z')];
  // The service lists by version too, across incarnations.
  const listed = [...old, ...live].sort((a, b) => b.version - a.version);

  it('lists newest first by time: the live incarnation on top', () => {
    expect(historyOrder(listed).map((e) => `${e.version} ${e.createdAt.slice(0, 10)}`)).toEqual([
      '2 2030-02-02',
      '1 2030-02-01',
      '5 2030-01-05',
      '4 2030-01-04',
      '3 2030-01-03',
      '2 2030-01-02',
      '1 2030-01-01',
    ]);
  });

  it('marks only the live version current, not the earlier incarnation’s version of the same number', () => {
    const policy = { version: 1, createdAt: '2030-02-01T00:00:00.000Z' };
    const found = currentEntry(listed, policy);
    expect(found).toBe(live[0]);
    expect(listed.filter((e) => e === found)).toHaveLength(1);
    expect(currentEntry(listed, { version: 2, createdAt: '2030-02-01T00:00:00.000Z' })).toBe(live[1]);
  });

  it('marks the earlier entry current when the policy was created again with a definition saved before', () => {
    // The store keeps one entry per version and hash: the new incarnation's version 3 is that one.
    expect(currentEntry(old, { version: 3, createdAt: '2030-03-01T00:00:00.000Z' })).toBe(old[2]);
  });

  it('marks the current version of a policy never deleted, and none without a policy', () => {
    expect(currentEntry(old, { version: 5, createdAt: '2030-01-01T00:00:00.000Z' })).toBe(old[4]);
    expect(currentEntry(old, null)).toBeNull();
    // A version not (yet) in the history read: none is marked.
    expect(currentEntry(old, { version: 6, createdAt: '2030-01-01T00:00:00.000Z' })).toBeNull();
  });
});
