/**
 * A connection's credential checks, one at a time. A check asked for while one runs is made once
 * that one ends: the running one may have read before what the new one is asked to see (a
 * revocation made meanwhile). Of several asked for meanwhile, the last is made. A check that fails
 * (a store hiccup) leaves the connection as it is: the next heartbeat checks again.
 */
export class OneCheckAtATime {
  private running = false;
  private next: (() => Promise<void>) | null = null;

  run(check: () => Promise<void>): void {
    if (this.running) {
      this.next = check;
      return;
    }
    this.running = true;
    check()
      .catch(() => {})
      .finally(() => {
        this.running = false;
        const next = this.next;
        this.next = null;
        if (next) this.run(next);
      });
  }
}
