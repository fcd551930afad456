import type { Clock } from '../../lib/clock.js';
import { Watchers } from '../../lib/watchers.js';
import type { Store } from '../../storage/db.js';
import { hashApiKey } from './keys.js';
import { type KeyRevocation, type KeyScope, parseScopes } from './model.js';

export interface KeyPrincipal {
  kind: 'apiKey';
  keyId: string;
  organizationId: string;
  projectId: string | null;
  tier: string;
  rateLimitPerMinute: number | null;
  /** What the key may do; routes declare the scopes they accept (plugins/auth.ts). */
  scopes: readonly KeyScope[];
  /** The key's lineage (storage/migrations/0028_key_lineage.ts): what it asks for, no key of it approves. */
  lineageId: string;
  /**
   * The person who created the key (storage/migrations/0030_key_creator.ts), a lineage's root's for a
   * key minted by a key; null (or absent) when unknown. Under dual control the key relays as them too.
   */
  createdBy?: string | null;
}

const MAX_CACHED = 50_000;
const FLUSH_EVERY_MS = 15_000;

/**
 * Resolves API keys to principals. Valid keys are cached in memory so the hot path does not touch
 * the store; every change that can make a cached key stale (revoke, delete, regenerate, organization
 * delete or tier change) calls forget*, so the very next request sees it. `lastUsedAt` is collected in
 * memory and written in one batch every few seconds instead of one write per request.
 *
 * forget* runs on every instance (here, then through onForget on the others), so it is also where
 * revocations are told to what keys hold open: forgetKeys is called only for keys that stopped
 * authenticating; forgetOrganization also follows a tier change, so it tells of a revocation only once
 * the store confirms the organization is gone.
 */
export class ApiKeyAuthenticator {
  private readonly cache = new Map<string, KeyPrincipal>();
  private readonly lastUsed = new Map<string, string>();
  private readonly timer: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();
  /** Bumped by every forget*, so a load that raced with a revocation is not cached. */
  private generation = 0;
  /** Called after local forget*, so other instances can forget too (scale-out). */
  onForget: ((what: { keyIds?: string[]; organizationId?: string }) => void) | null = null;
  /** While set, nothing is read from or kept in the cache: every key is looked up in the store (pause). */
  private paused = false;
  private readonly revocationWatchers = new Watchers<KeyRevocation>();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {
    this.timer = setInterval(() => void this.flush(), FLUSH_EVERY_MS);
    this.timer.unref();
  }

  async authenticate(key: string): Promise<KeyPrincipal | null> {
    const hash = hashApiKey(key);
    let principal = this.paused ? null : (this.cache.get(hash) ?? null);
    if (!principal) {
      const generation = this.generation;
      const row = await this.store.db
        .selectFrom('api_keys as k')
        .innerJoin('organizations as o', 'o.id', 'k.organization_id')
        .select([
          'k.id',
          'k.organization_id',
          'k.project_id',
          'k.is_revoked',
          'k.scopes',
          'k.lineage_id',
          'k.created_by',
          'o.tier',
          'o.rate_limit_per_minute',
        ])
        .where('k.key_hash', '=', hash)
        .executeTakeFirst();
      if (!row || row.is_revoked) return null;
      principal = {
        kind: 'apiKey',
        keyId: row.id,
        organizationId: row.organization_id,
        projectId: row.project_id,
        tier: row.tier,
        rateLimitPerMinute: row.rate_limit_per_minute,
        scopes: parseScopes(row.scopes),
        lineageId: row.lineage_id ?? row.id,
        createdBy: row.created_by,
      };
      if (generation === this.generation && !this.paused) {
        if (this.cache.size >= MAX_CACHED) this.cache.delete(this.cache.keys().next().value!);
        this.cache.set(hash, principal);
      }
    }
    this.lastUsed.set(principal.keyId, this.clock.now().toISOString());
    return principal;
  }

  /** The last use not yet written to the store, so reads are current between flushes. */
  pendingLastUsed(keyId: string): string | undefined {
    return this.lastUsed.get(keyId);
  }

  /** These keys stopped authenticating (revoked, deleted, or their project deleted or its key regenerated). */
  forgetKeys(keyIds: string[], broadcast = true): void {
    this.generation++;
    const ids = new Set(keyIds);
    for (const [hash, p] of this.cache) if (ids.has(p.keyId)) this.cache.delete(hash);
    if (broadcast) this.onForget?.({ keyIds });
    if (keyIds.length > 0) this.revoked({ keyIds });
  }

  /** The organization changed (tier, rate) or was deleted. */
  forgetOrganization(organizationId: string, broadcast = true): void {
    this.generation++;
    for (const [hash, p] of this.cache) if (p.organizationId === organizationId) this.cache.delete(hash);
    if (broadcast) this.onForget?.({ organizationId });
    if (this.revocationWatchers.size > 0) void this.revokedIfGone(organizationId);
  }

  /**
   * Calls `watcher` on this instance whenever keys stop authenticating, whichever instance revoked
   * them (with scale-out, revocations from other instances arrive through forget*). Returns the
   * function that stops watching.
   */
  watchRevocations(watcher: (r: KeyRevocation) => void): () => void {
    return this.revocationWatchers.watch(watcher);
  }

  private revoked(r: KeyRevocation): void {
    this.revocationWatchers.tell(r);
  }

  /**
   * A tier change and a deletion both forget the organization; only a deletion revokes its keys.
   * Should the store not answer, nothing is ended here: the keys are refused anyway, and open
   * streams re-check their credentials at every heartbeat.
   */
  private async revokedIfGone(organizationId: string): Promise<void> {
    try {
      const row = await this.store.db
        .selectFrom('organizations')
        .select('id')
        .where('id', '=', organizationId)
        .executeTakeFirst();
      if (!row) this.revoked({ organizationId });
    } catch {
      // See above.
    }
  }

  /** Drops every cached key, locally only. */
  private forgetAll(): void {
    this.generation++;
    this.cache.clear();
  }

  /**
   * Scale-out, while invalidations can be missed (the subscriber connection is away): forgets every
   * key and looks each one up in the store until resume(), so a key revoked on another instance
   * meanwhile stops authenticating here too.
   */
  pause(): void {
    this.paused = true;
    this.forgetAll();
  }

  /** Invalidations arrive again: caching resumes from empty. */
  resume(): void {
    this.forgetAll();
    this.paused = false;
  }

  async flush(): Promise<void> {
    // Serialise flushes so a slow one is never overtaken by the next.
    this.flushing = this.flushing.then(async () => {
      if (this.lastUsed.size === 0) return;
      const batch = [...this.lastUsed];
      this.lastUsed.clear();
      try {
        await this.store.db.transaction().execute(async (trx) => {
          for (const [id, at] of batch) {
            // Another instance may have stored a later use already: the time only moves forward.
            await trx
              .updateTable('api_keys')
              .set({ last_used_at: at })
              .where('id', '=', id)
              .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', at)]))
              .execute();
          }
        });
      } catch {
        // Keep the newest values for the next attempt, unless a newer use replaced them meanwhile.
        for (const [id, at] of batch) if (!this.lastUsed.has(id)) this.lastUsed.set(id, at);
      }
    });
    return this.flushing;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}
