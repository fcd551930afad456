import { type CompiledPolicy, compilePolicy, type PolicyDefinition } from '@svc/policy-engine';
import { hashJson } from '../../ledger/canonical.js';
import type { PolicyRepository, PolicyRow } from './repository.js';

/** A policy as the hot path needs it: compiled once, hashed once. */
export interface LoadedPolicy {
  toolName: string;
  version: number;
  isActive: boolean;
  mode: 'deterministic' | 'llm';
  definition: PolicyDefinition;
  compiled: CompiledPolicy;
  /** sha256 of the canonical definition, bound into receipts. */
  hash: string;
}

export function definitionOf(
  row: Pick<PolicyRow, 'mode' | 'constraints' | 'session_constraints' | 'llm_config'>,
): PolicyDefinition {
  return {
    mode: row.mode as PolicyDefinition['mode'],
    constraints: JSON.parse(row.constraints),
    sessionConstraints: row.session_constraints ? JSON.parse(row.session_constraints) : null,
    llmConfig: row.llm_config ? JSON.parse(row.llm_config) : null,
  };
}

export function loadPolicy(row: PolicyRow): LoadedPolicy {
  const definition = definitionOf(row);
  return {
    toolName: row.tool_name,
    version: row.version,
    isActive: row.is_active === 1,
    mode: definition.mode,
    definition,
    compiled: compilePolicy(definition),
    hash: hashJson(definition),
  };
}

const MAX_ENTRIES = 100_000;

/**
 * Per-instance cache of compiled policies keyed by organization and tool, including "no policy"
 * answers. Every write to a policy calls invalidate(); with scale-out the invalidation is also
 * broadcast so other instances drop their copy before their next request.
 */
export class PolicyCache {
  private readonly entries = new Map<string, LoadedPolicy | null>();
  /** Bumped on every invalidation so a load that raced with a write is not cached. */
  private generation = 0;
  onInvalidate: ((organizationId: string, toolName: string | null) => void) | null = null;
  private readonly listeners: ((organizationId: string, toolName: string | null) => void)[] = [];
  /** While set, nothing is read from or kept in the cache: every lookup reads the store (pause). */
  private paused = false;

  constructor(private readonly policies: PolicyRepository) {}

  private key(organizationId: string, toolName: string): string {
    return `${organizationId}\u0000${toolName}`;
  }

  async get(organizationId: string, toolName: string): Promise<LoadedPolicy | null> {
    const key = this.key(organizationId, toolName);
    const hit = this.paused ? undefined : this.entries.get(key);
    if (hit !== undefined) return hit;
    const generation = this.generation;
    const row = await this.policies.get(organizationId, toolName);
    const loaded = row ? loadPolicy(row) : null;
    if (generation === this.generation && !this.paused) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
      this.entries.set(key, loaded);
    }
    return loaded;
  }

  /** Drops one tool's entry, or every entry of the organization when toolName is null. */
  invalidate(organizationId: string, toolName: string | null, broadcast = true): void {
    this.generation++;
    if (toolName !== null) {
      this.entries.delete(this.key(organizationId, toolName));
    } else {
      const prefix = `${organizationId}\u0000`;
      for (const key of this.entries.keys()) if (key.startsWith(prefix)) this.entries.delete(key);
    }
    for (const listener of this.listeners) listener(organizationId, toolName);
    if (broadcast) this.onInvalidate?.(organizationId, toolName);
  }

  /** Caches derived from policies (the LLM verdict cache) follow every invalidation, local or remote. */
  onChange(listener: (organizationId: string, toolName: string | null) => void): void {
    this.listeners.push(listener);
  }

  /** Drops every entry, locally only. */
  private clear(): void {
    this.generation++;
    this.entries.clear();
  }

  /**
   * Scale-out, while invalidations can be missed (the subscriber connection is away): drops every
   * entry and reads the store on every lookup until resume(), so a policy changed on another
   * instance meanwhile is never answered from an old copy.
   */
  pause(): void {
    this.paused = true;
    this.clear();
  }

  /** Invalidations arrive again: caching resumes from empty. */
  resume(): void {
    this.clear();
    this.paused = false;
  }
}
