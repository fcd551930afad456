import type { JudgeAnswer, JudgeBinding } from './model.js';

interface Entry {
  answer: JudgeAnswer;
  binding: JudgeBinding;
  expiresAt: number;
}

/**
 * Verdicts by (organization, tool, policy version and hash, provider, model, SHA-256 of the canonical
 * arguments), bounded in age and count (least recently used goes first). The key holds a hash of the
 * arguments, never the arguments: an entry does not grow with the call it judged. Only believable
 * answers are kept: a failure is judged again next time. A policy update changes its version and
 * hash, so entries of the old policy are never hit again; forget() drops them at once.
 */
export class VerdictCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries: number,
    private readonly now: () => number,
  ) {}

  get(key: string): Entry | null {
    const hit = this.entries.get(key);
    if (!hit) return null;
    this.entries.delete(key);
    if (hit.expiresAt <= this.now()) return null;
    this.entries.set(key, hit);
    return hit;
  }

  set(key: string, answer: JudgeAnswer, binding: JudgeBinding): void {
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { answer, binding, expiresAt: this.now() + this.ttlMs });
  }

  /** Drops every verdict of one tool's policy (or of the whole organization when toolName is null). */
  forget(organizationId: string, toolName: string | null): void {
    const prefix = toolName === null ? `${organizationId}\u0000` : `${organizationId}\u0000${toolName}\u0000`;
    for (const key of this.entries.keys()) if (key.startsWith(prefix)) this.entries.delete(key);
  }

  get size(): number {
    return this.entries.size;
  }
}
