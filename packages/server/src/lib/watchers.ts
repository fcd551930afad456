/**
 * Functions told of something in turn (a key revoked, a session ended), each on its own: one that
 * throws keeps none of the others from running.
 */
export class Watchers<T> {
  private readonly all = new Set<(value: T) => void>();

  get size(): number {
    return this.all.size;
  }

  /** Adds `watcher`; returns the function that removes it. */
  watch(watcher: (value: T) => void): () => void {
    this.all.add(watcher);
    return () => this.all.delete(watcher);
  }

  tell(value: T): void {
    for (const w of this.all) {
      try {
        w(value);
      } catch {
        // One watcher's failure must not keep the others from hearing of it.
      }
    }
  }
}
