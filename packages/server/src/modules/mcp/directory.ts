import type { McpRepository, UpstreamRow } from './repository.js';

const TTL_MS = 1000;
const MAX_ENTRIES = 10_000;

/**
 * Upstream lookups of the data plane, by organization and slug, kept for one second: a store query
 * per call is a noticeable part of the gateway's latency budget. Changes made through this instance
 * apply at once (forget); changes made on another instance apply within the second. Misses are not
 * kept, so a new upstream is usable immediately.
 */
export class UpstreamDirectory {
  private readonly entries = new Map<string, { row: UpstreamRow; at: number }>();

  constructor(
    private readonly repo: Pick<McpRepository, 'getBySlug'>,
    private readonly now: () => number = Date.now,
  ) {}

  async get(organizationId: string, slug: string): Promise<UpstreamRow | undefined> {
    const key = `${organizationId}\n${slug}`;
    const hit = this.entries.get(key);
    if (hit && this.now() - hit.at < TTL_MS) return hit.row;
    const row = await this.repo.getBySlug(organizationId, slug);
    this.entries.delete(key);
    if (row) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
      this.entries.set(key, { row, at: this.now() });
    }
    return row;
  }

  forget(organizationId: string): void {
    const prefix = `${organizationId}\n`;
    for (const key of this.entries.keys()) if (key.startsWith(prefix)) this.entries.delete(key);
  }
}
