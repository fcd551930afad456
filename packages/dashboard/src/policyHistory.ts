/**
 * A policy's version history as the editor lists it. A policy deleted and created again restarts at
 * version 1 and keeps its earlier incarnation's versions: version numbers repeat, so the history is
 * ordered by time, and the current version is the one of the live incarnation.
 */

/** One recorded version, as `GET /v1/policies/:toolName/versions` lists it. */
export interface VersionEntry {
  version: number;
  policyHash: string;
  /** When this version was saved. */
  createdAt: string;
}

const time = (at: string) => {
  const t = Date.parse(at);
  return Number.isNaN(t) ? 0 : t;
};

/** Newest first by when each version was saved; at the same instant, the greater version first. */
export function historyOrder<T extends VersionEntry>(versions: readonly T[]): T[] {
  return [...versions].sort((a, b) => time(b.createdAt) - time(a.createdAt) || b.version - a.version);
}

/**
 * The entry of `versions` that is the policy as it is now (`policy`: its version, and `createdAt`,
 * when its incarnation was created), or null. Versions of an earlier incarnation with the same
 * number were saved before this incarnation was created, so they are not it; of several candidates
 * the newest is taken, so at most one entry is current.
 */
export function currentEntry<T extends VersionEntry>(
  versions: readonly T[],
  policy: { version: number; createdAt: string } | null,
): T | null {
  if (!policy) return null;
  const since = time(policy.createdAt);
  const ordered = historyOrder(versions);
  return (
    ordered.find((v) => v.version === policy.version && time(v.createdAt) >= since) ??
    // Created again with a definition saved before at that version: the store keeps one entry for
    // both (same version and hash), saved before this incarnation.
    ordered.find((v) => v.version === policy.version) ??
    null
  );
}
