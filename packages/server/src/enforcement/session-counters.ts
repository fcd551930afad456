import {
  evaluateSession,
  type FailedConstraint,
  type SessionConstraints,
  type SessionIncrements,
  type SessionState,
  sessionIncrements,
} from '@svc/policy-engine';
import type { Store } from '../storage/db.js';

interface Entry {
  state: SessionState;
  /** Reservations not yet committed or released; such an entry must not be evicted. */
  pending: number;
}

/** The stored usage of one session and tool (zero when the session is new). */
export async function loadSessionState(
  store: Store,
  org: string,
  session: string,
  tool: string,
): Promise<SessionState> {
  const row = await store.db
    .selectFrom('session_counters')
    .select(['calls', 'cumulative'])
    .where('organization_id', '=', org)
    .where('session_id', '=', session)
    .where('tool_name', '=', tool)
    .executeTakeFirst();
  return { calls: row?.calls ?? 0, cumulative: row ? JSON.parse(row.cumulative) : {} };
}

/**
 * The session after a call adds `inc` (or, with `sign` -1, after a counted call is given back). Own
 * totals only: a total named `constructor` must not start from what a plain object inherits.
 */
export function counted(before: SessionState, inc: SessionIncrements, sign: 1 | -1 = 1): SessionState {
  const cumulative = { ...before.cumulative };
  for (const [name, value] of Object.entries(inc.cumulative))
    cumulative[name] = (Object.hasOwn(cumulative, name) ? cumulative[name]! : 0) + sign * value;
  return { calls: before.calls + sign * inc.calls, cumulative };
}

export interface Reservation {
  failures: FailedConstraint[];
  /** Absolute values after this call, for the durable write; null when the call was refused. */
  after: SessionState | null;
  /** Undo the reservation (the call was not recorded). */
  release(): void;
  /** The reservation is durable; the entry may now be evicted. */
  settle(): void;
}

/**
 * Session counters for maxCalls and cumulativeLimits: check-and-count in one atomic step. Only allowed
 * calls count; the absolute values after the call are written in the same transaction as the decision.
 * In memory for one process (below), in Redis when several instances share the counters
 * (`scale/sessions.ts`).
 */
export interface SessionCounters {
  /** Checks the call against the session constraints and, if it passes, counts it. */
  reserve(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<Reservation>;
  /** What the session constraints would refuse in this call now; counts nothing. */
  check(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<FailedConstraint[]>;
}

const MAX_ENTRIES = 200_000;
const noop = () => {};

/**
 * The check and the increment happen in one synchronous step on an in-memory copy (loaded once from
 * the store), so concurrent calls in one process can never both take the last slot.
 */
export class MemorySessionCounters implements SessionCounters {
  private readonly entries = new Map<string, Entry>();
  private readonly loading = new Map<string, Promise<Entry>>();

  constructor(
    private readonly store: Store,
    private readonly maxEntries = MAX_ENTRIES,
  ) {}

  /** The stored usage of a session and tool not in memory. */
  protected loadState(org: string, session: string, tool: string): Promise<SessionState> {
    return loadSessionState(this.store, org, session, tool);
  }

  /** Loads the entry of a session and tool not in memory, once however many calls wait for it. */
  private load(key: string, org: string, session: string, tool: string): Promise<Entry> {
    let load = this.loading.get(key);
    if (!load) {
      load = (async () => {
        const entry: Entry = { state: await this.loadState(org, session, tool), pending: 0 };
        this.evictIfFull();
        this.entries.set(key, entry);
        return entry;
      })().finally(() => this.loading.delete(key));
      this.loading.set(key, load);
    }
    return load;
  }

  private evictIfFull(): void {
    if (this.entries.size < this.maxEntries) return;
    for (const [key, e] of this.entries) {
      if (e.pending === 0) {
        this.entries.delete(key);
        return;
      }
    }
  }

  async check(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<FailedConstraint[]> {
    const key = keyOf(org, session, tool);
    const entry = this.entries.get(key) ?? (await this.load(key, org, session, tool));
    return evaluateSession(constraints, entry.state, args);
  }

  /** Checks the call against the session constraints and, if it passes, counts it. */
  async reserve(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<Reservation> {
    const key = keyOf(org, session, tool);
    // In memory, the entry is taken without awaiting; loaded, it is used only if a load that
    // finished meanwhile did not evict it (a count on an entry no longer kept would be lost to the
    // next call, which loads the session again).
    let entry = this.entries.get(key);
    while (entry === undefined) {
      const loaded = await this.load(key, org, session, tool);
      if (this.entries.get(key) === loaded) entry = loaded;
    }
    // From here to the increment nothing awaits: check-and-count is atomic within the process.
    const failures = evaluateSession(constraints, entry.state, args);
    if (failures.length > 0) return { failures, after: null, release: noop, settle: noop };
    const inc = sessionIncrements(constraints, args);
    const before = entry.state;
    const after = counted(before, inc);
    entry.state = after;
    entry.pending++;
    const counting = entry;
    let done = false;
    return {
      failures,
      after,
      release: () => {
        if (done) return;
        done = true;
        counting.pending--;
        counting.state = counted(counting.state, inc, -1);
      },
      settle: () => {
        if (done) return;
        done = true;
        counting.pending--;
      },
    };
  }
}

const keyOf = (org: string, session: string, tool: string) => `${org}\u0000${session}\u0000${tool}`;
