/** The pace of `spreadOut`: this many milliseconds per item, at most MAX_SPREAD_MS in all. */
const MS_PER_ITEM = 2;
const MAX_SPREAD_MS = 10_000;

/**
 * Runs `fn` for each item, each at a random moment within 2 ms per item (10 s at most): work that
 * would otherwise start all at once (every open stream re-reading its credentials from the store)
 * comes at about 500 items a second, leaving the store to the requests meanwhile. A throwing `fn`
 * is ignored (the item is gone).
 */
export function spreadOut<T>(items: Iterable<T>, fn: (item: T) => void): void {
  const all = [...items];
  const window = Math.min(MAX_SPREAD_MS, all.length * MS_PER_ITEM);
  for (const item of all) {
    setTimeout(() => {
      try {
        fn(item);
      } catch {
        // Gone meanwhile.
      }
    }, Math.random() * window).unref();
  }
}
