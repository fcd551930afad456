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

/** The HTTP status of a refused request (an ApiError's), else null. */
const statusOf = (err: unknown): number | null =>
  typeof err === 'object' && err !== null && typeof (err as { status?: unknown }).status === 'number'
    ? (err as { status: number }).status
    : null;

/**
 * Runs an action on a row of a list (revoke, delete, activate, approve…); when the service refuses
 * it with a 4xx other than 401 (404: the thing was deleted elsewhere meanwhile; 409: it changed), the list is
 * read again with `load` before the refusal is passed on, so that the row shows what is now (or goes)
 * while the refusal's message is said. A 401 ends the session instead; a failed read again is left to
 * the list's own error.
 */
export async function readAgainIfRefused<T>(action: () => Promise<T>, load: () => Promise<void>): Promise<T> {
  try {
    return await action();
  } catch (err) {
    const status = statusOf(err);
    if (status !== null && status >= 400 && status < 500 && status !== 401) await load().catch(() => {});
    throw err;
  }
}
