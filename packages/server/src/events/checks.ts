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

/**
 * The store reads of one round of credential checks (a heartbeat of a transport, or every connection
 * re-checked at once), each made once and shared by every check of the round that needs it: a
 * person's thousand streams of one organization read the membership once per round, not a thousand
 * times. A read is named by everything it depends on (what is read, whose, of which organization),
 * so only checks that would have made the very same read share it. The first check that needs a read
 * makes it, when the round's checks have begun (never earlier); the others of the round take its
 * answer. A read that fails fails every check that shares it, each exactly as it would have failed
 * alone (OneCheckAtATime: the connection stays, the next round reads again); it is not made again
 * within the round, so a store that is failing is not asked once per connection either.
 */
export class CheckRound {
  private readonly reads = new Map<string, Promise<unknown>>();

  read<T>(name: readonly string[], read: () => Promise<T>): Promise<T> {
    const key = JSON.stringify(name);
    let answer = this.reads.get(key) as Promise<T> | undefined;
    if (!answer) {
      answer = read();
      this.reads.set(key, answer);
    }
    return answer;
  }
}

/** `read` shared within `round`, or made on its own outside one (a stream's first checks). */
export function sharedRead<T>(
  round: CheckRound | undefined,
  name: readonly string[],
  read: () => Promise<T>,
): Promise<T> {
  return round ? round.read(name, read) : read();
}
