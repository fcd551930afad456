/**
 * Runs reads of one thing (a list, a queue) so that only the latest one's answer is taken: an earlier
 * read that answers later would show what the page knew before. The promise of each run settles once
 * the latest run has settled, so what follows a run (buttons enabled again, say) sees the list as the
 * latest read has it, never a superseded answer.
 */
export function latestOnly() {
  let runs = 0;
  let latest: Promise<void> = Promise.resolve();
  return async function run<T>(
    read: () => Promise<T>,
    show: (value: T) => void,
    onError: (err: unknown) => void,
  ): Promise<void> {
    const mine = ++runs;
    const settled = (async () => {
      try {
        const value = await read();
        if (mine === runs) show(value);
      } catch (err) {
        if (mine === runs) onError(err);
      }
    })();
    latest = settled;
    for (let waiting = settled; ; waiting = latest) {
      await waiting;
      if (latest === waiting) return;
    }
  };
}
