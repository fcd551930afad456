import type { SessionState } from '@svc/policy-engine';
import { describe, expect, it } from 'vitest';
import type { Store } from '../storage/db.js';
import { MemorySessionCounters } from './session-counters.js';

/** Counters over a map standing for the store; `gated` sessions load only once `open()` is called. */
class Counters extends MemorySessionCounters {
  readonly stored = new Map<string, SessionState>();
  private gates = new Map<string, Promise<void>>();

  constructor(maxEntries: number) {
    super(null as unknown as Store, maxEntries);
  }

  gate(session: string): () => void {
    let open!: () => void;
    this.gates.set(session, new Promise<void>((r) => (open = r)));
    return open;
  }

  protected override async loadState(_org: string, session: string): Promise<SessionState> {
    await this.gates.get(session);
    return this.stored.get(session) ?? { calls: 0, cumulative: {} };
  }
}

const LIMIT = { maxCalls: 2 };
const ticks = async (n: number) => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

describe('MemorySessionCounters', () => {
  it('never counts on an entry that a load finishing meanwhile evicted: the last slot is taken once', async () => {
    // However many microtasks separate the other session's load from this call, the outcome is the same.
    for (let gap = 0; gap < 6; gap++) {
      const counters = new Counters(2);
      const reserve = (session: string) => counters.reserve('org', session, 'tool', LIMIT, {});
      // s1 has one call recorded; s2 fills the memory.
      const first = await reserve('s1');
      first.settle();
      counters.stored.set('s1', first.after!);
      (await reserve('s2')).settle();
      // s3 is loading; its load ends (evicting an entry) just as s1's second call is counted.
      const open = counters.gate('s3');
      const third = reserve('s3');
      open();
      await ticks(gap);
      const second = reserve('s1');
      expect((await second).failures, `gap ${gap}`).toEqual([]);
      await third;
      // While the second call is being recorded, a third of s1 must find the session full.
      const over = await reserve('s1');
      expect(
        over.failures.map((f) => f.constraint_type),
        `gap ${gap}`,
      ).toEqual(['max_calls']);
    }
  });
});
