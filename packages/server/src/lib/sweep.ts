/**
 * Runs a receipt sweep of a process (owed spend receipts, owed capsule receipts): a pass when started (`start` does not wait for it), then one
 * every `intervalMs` unless the previous one still runs. `close` stops the timer, ends the running
 * pass after the receipt it is writing, and waits for it, so nothing is written once it resolved,
 * and no pass starts after it. A failed pass is logged; the next one tries again.
 */
export function receiptSweep(opts: {
  repair: (stop: () => boolean) => Promise<unknown>;
  intervalMs: number;
  /** What a failed pass is logged as (`<what> failed`). */
  what: string;
  log: { error(obj: object, msg: string): void };
}) {
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  let running: Promise<void> | undefined;
  const pass = (): void => {
    if (closed || running) return;
    // Called at once; a repair that throws before its first await is logged like one that rejects.
    running = (async () => opts.repair(() => closed))()
      .then(
        () => {},
        (err) => opts.log.error({ err }, `${opts.what} failed`),
      )
      .finally(() => {
        running = undefined;
      });
  };
  return {
    start(): void {
      if (closed || timer) return;
      pass();
      timer = setInterval(pass, opts.intervalMs);
      timer.unref();
    },
    async close(): Promise<void> {
      closed = true;
      clearInterval(timer);
      await running;
    },
  };
}
