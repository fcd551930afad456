/**
 * One `svc serve` per embedded store. Without Redis every process keeps its caches and counters in
 * memory (API keys, policies, rate limits, session limits), so two processes serving one SQLite file
 * disagree: a key revoked on one stays accepted on the other, limits are counted twice over. The
 * serving process records itself in the store (table serve_owner, one row: pid, host, a random
 * instance id, a heartbeat it refreshes every 5 s), and a second `svc serve` on the same file reads
 * that row and refuses to start while its process lives. Other commands (migrate, keys, token…)
 * neither read nor write it.
 *
 * Reading the row and writing ours is one write transaction (BEGIN IMMEDIATE): of two processes
 * starting at once, the second reads what the first wrote, so exactly one wins. The row's process
 * counts as gone, and its row is taken over at once, only where its pid can be checked: on this host,
 * in this pid namespace (two containers on one volume both see themselves as pid 1), and not a pid
 * reused since (its start time, on Linux); while that process lives it is never taken over from
 * there, however old its heartbeat (a process busy or stopped for a while still serves), where its
 * start time is known (Linux). Anywhere
 * else the heartbeat decides: a row not refreshed for 15 s (three heartbeats) is taken over; a fresh
 * one is refused. A clean stop removes the row.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname as osHostname } from 'node:os';
import type SQLite from 'better-sqlite3';
import { openSqliteHandle } from './db.js';
import { isSqliteBusy } from './errors.js';
import type { ServeOwnerTable } from './schema.js';

/** How often the serving process refreshes its heartbeat. */
export const HEARTBEAT_MS = 5000;
/** A heartbeat this old is a process gone or frozen: its store is taken over. Three heartbeats. */
export const STALE_MS = 3 * HEARTBEAT_MS;
/** After a refresh that failed (the write lock held by another connection, an I/O error). */
const RETRY_MS = 250;
/**
 * Heartbeats in a row with no commit of any other connection after which the heartbeat checkpoints
 * the WAL itself: on an idle store nothing else would, and each heartbeat adds a frame to it.
 */
export const IDLE_CHECKPOINT_BEATS = 12;
/** How long a claim, a confirmation or a release waits for another connection's write lock. */
const LOCK_WAIT_MS = 5000;

const TABLE = 'serve_owner';

/** Who a serving process is, as its row records it. */
export interface OwnerIdentity {
  /** Random per process start: its own row, whatever the pid. */
  instanceId: string;
  pid: number;
  hostname: string;
  /** Linux: the boot id and the pid namespace, within which `pid` names one process; null elsewhere. */
  pidScope: string | null;
  /** Linux: the process's start time (clock ticks since boot); a reused pid has another. */
  pidStarted: string | null;
}

/** The row of the process serving the store. */
export type OwnerRecord = Omit<ServeOwnerTable, 'id'>;

/** The state and start time of process `pid`, from /proc (Linux), or null. */
function procStat(pid: number): { state: string; started: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After "pid (comm) ": field 3 (state) on; comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0] ?? '', started: fields[19] ?? '' };
  } catch {
    return null;
  }
}

/** Boot id and pid namespace: two processes with equal scopes see the same pids. Null off Linux. */
function currentPidScope(): string | null {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const ns = readlinkSync('/proc/self/ns/pid');
    return boot && ns ? `${boot} ${ns}` : null;
  } catch {
    return null;
  }
}

/** This process, with a new instance id. */
export function currentIdentity(): OwnerIdentity {
  return {
    instanceId: randomUUID(),
    pid: process.pid,
    hostname: osHostname(),
    pidScope: currentPidScope(),
    pidStarted: procStat(process.pid)?.started || null,
  };
}

/**
 * Whether process `pid` (of this pid namespace) still runs and is the one that started at `started`
 * (when known). In doubt (no /proc), a process that exists counts as alive: the heartbeat decides.
 */
export function processAlive(pid: number, started: string | null): boolean {
  // 0 and negative pids are process groups to kill(): never the owner's.
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it exists, under another user.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const stat = procStat(pid);
  if (!stat) return true;
  // A zombie has exited; its parent has not reaped it yet.
  if (stat.state === 'Z' || stat.state === 'X') return false;
  return started === null || stat.started === started;
}

/** Whether `record`'s pid names a process this one can check: the same pid namespace on this host. */
function samePidSpace(record: OwnerRecord, me: OwnerIdentity): boolean {
  if (record.pid_scope === null && me.pidScope === null) return record.hostname === me.hostname;
  return record.pid_scope === me.pidScope;
}

export type Verdict =
  | { take: true; previous: { record: OwnerRecord; why: 'gone' | 'stale' } | null }
  | { take: false; record: OwnerRecord; ageMs: number };

/**
 * What a process `me` starting at `nowMs` does with the row it found: take the store (no row, its
 * own, a process gone, a heartbeat older than `staleMs`) or refuse.
 */
export function judge(
  record: OwnerRecord | undefined,
  me: OwnerIdentity,
  nowMs: number,
  alive: (pid: number, started: string | null) => boolean = processAlive,
  staleMs = STALE_MS,
): Verdict {
  if (!record || record.instance_id === me.instanceId) return { take: true, previous: null };
  // Our own pid is checked too: a process before us that had it is gone (another start time), a
  // server started earlier in this same process is not.
  const ageMs = nowMs - Date.parse(record.heartbeat_at);
  if (samePidSpace(record, me)) {
    if (!alive(record.pid, record.pid_started)) return { take: true, previous: { record, why: 'gone' } };
    // That very process lives (its start time matches): busy or frozen, it still serves the store,
    // whatever its heartbeat says. Without a start time (not Linux) the pid may have been reused.
    if (record.pid_started !== null) return { take: false, record, ageMs };
  }
  // An unreadable time counts as stale.
  if (!(ageMs < staleMs)) return { take: true, previous: { record, why: 'stale' } };
  return { take: false, record, ageMs };
}

const seconds = (ms: number) => Math.max(0, Math.round(ms / 1000));

/** `svc serve` found the store served by another live process. */
export class StoreOwnedError extends Error {
  override name = 'StoreOwnedError';
  constructor(
    readonly path: string,
    readonly owner: OwnerRecord,
    ageMs: number,
  ) {
    super(
      `the SQLite database ${path} (SVC_DATABASE_URL) is already served by svc serve pid ${owner.pid} ` +
        `on host ${owner.hostname} since ${owner.started_at} (last heartbeat ${seconds(ageMs)} s ago): ` +
        'one SQLite file is served by one process; stop that one first, or run several instances on ' +
        'PostgreSQL (docs/deploy.md)',
    );
  }
}

/** The serving process found its row taken over by another process. */
export class StoreOwnershipLostError extends Error {
  override name = 'StoreOwnershipLostError';
  constructor(path: string, by: OwnerRecord | undefined, heartbeatAgeMs: number) {
    const who = by ? `svc serve pid ${by.pid} on host ${by.hostname}` : 'another process';
    super(
      `${who} took over the SQLite database ${path} (this process's last heartbeat was ` +
        `${seconds(heartbeatAgeMs)} s old, older than ${seconds(STALE_MS)} s): this instance stops`,
    );
  }
}

/** The logger calls used (pino's, Fastify's). */
export interface OwnerLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface OwnerOptions {
  /** Where failed refreshes and a failed release are logged; read at each use. */
  log: () => OwnerLog;
  /** The row was taken over by another process: called once, the heartbeat stopped. */
  onLost: (err: StoreOwnershipLostError) => void;
  heartbeatMs?: number;
  now?: () => number;
  identity?: OwnerIdentity;
  alive?: (pid: number, started: string | null) => boolean;
}

const COLUMNS = 'instance_id, pid, hostname, pid_scope, pid_started, started_at, heartbeat_at';

/**
 * Claims the store at `path` for this process, or throws StoreOwnedError naming the live process
 * that serves it. Null when the store has no serve_owner table yet (a new store, or one migrated by
 * an older svc): claim again once it is migrated. The claim's heartbeat runs from here on.
 */
export function claimStore(path: string, options: OwnerOptions): StoreOwner | null {
  const now = options.now ?? Date.now;
  const me = options.identity ?? currentIdentity();
  // A connection of its own, which never waits for the write lock once claimed (the heartbeat runs
  // on the event loop). The row needs no fsync: a lost heartbeat is one the next one replaces.
  const handle = openSqliteHandle(path, LOCK_WAIT_MS, true);
  let verdict: Verdict;
  try {
    handle.pragma('synchronous = NORMAL');
    // A checkpoint takes as long as many commits: the store's other connections do them, and the
    // heartbeat only when they are idle (checkpointWhenIdle).
    handle.pragma('wal_autocheckpoint = 0');
    handle.exec('BEGIN IMMEDIATE');
    try {
      const table = handle
        .prepare("select 1 from sqlite_master where type = 'table' and name = ?")
        .get(TABLE);
      if (!table) {
        handle.exec('ROLLBACK');
        handle.close();
        return null;
      }
      const row = handle.prepare(`select ${COLUMNS} from ${TABLE} where id = 1`).get() as
        | OwnerRecord
        | undefined;
      verdict = judge(row, me, now(), options.alive);
      if (!verdict.take) throw new StoreOwnedError(path, verdict.record, verdict.ageMs);
      const at = new Date(now()).toISOString();
      handle
        .prepare(
          `insert into ${TABLE} (id, ${COLUMNS}) values (1, ?, ?, ?, ?, ?, ?, ?)
           on conflict (id) do update set instance_id = excluded.instance_id, pid = excluded.pid,
             hostname = excluded.hostname, pid_scope = excluded.pid_scope,
             pid_started = excluded.pid_started, started_at = excluded.started_at,
             heartbeat_at = excluded.heartbeat_at`,
        )
        .run(me.instanceId, me.pid, me.hostname, me.pidScope, me.pidStarted, at, at);
      handle.exec('COMMIT');
    } catch (err) {
      if (handle.open && handle.inTransaction) handle.exec('ROLLBACK');
      throw err;
    }
    handle.pragma('busy_timeout = 0');
  } catch (err) {
    if (handle.open) handle.close();
    throw err;
  }
  return new StoreOwner(handle, path, me, verdict.previous, options);
}

/** This process's claim on an embedded store: its heartbeat, and its release. */
export class StoreOwner {
  private timer: NodeJS.Timeout | null = null;
  private lastBeat: number;
  private lastLogged = Number.NEGATIVE_INFINITY;
  private takenOver: StoreOwnershipLostError | null = null;
  private released = false;
  /** The store's data_version at the last heartbeat, and the heartbeats since another commit. */
  private dataVersion = -1;
  private idleBeats = 0;
  private readonly now: () => number;
  private readonly heartbeatMs: number;
  private readonly update: SQLite.Statement;
  private readonly insert: SQLite.Statement;

  constructor(
    private readonly handle: SQLite.Database,
    readonly path: string,
    readonly identity: OwnerIdentity,
    /** The row this claim replaced, and why it could: its process gone, or its heartbeat stale. */
    readonly previous: { record: OwnerRecord; why: 'gone' | 'stale' } | null,
    private readonly options: OwnerOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.lastBeat = this.now();
    this.update = handle.prepare(`update ${TABLE} set heartbeat_at = ? where id = 1 and instance_id = ?`);
    this.insert = handle.prepare(
      `insert into ${TABLE} (id, ${COLUMNS}) values (1, ?, ?, ?, ?, ?, ?, ?) on conflict (id) do nothing`,
    );
    this.schedule(this.heartbeatMs);
  }

  /** The takeover this claim made, in words, or null when the store was free. */
  takeover(): string | null {
    if (!this.previous) return null;
    const { record, why } = this.previous;
    const reason =
      why === 'gone'
        ? 'its process is gone'
        : `its heartbeat stopped at ${record.heartbeat_at}, over ${seconds(STALE_MS)} s ago`;
    return `took over the SQLite database ${this.path} from svc serve pid ${record.pid} on host ${record.hostname}: ${reason}`;
  }

  get lost(): boolean {
    return this.lostError !== null;
  }

  /** Why the heartbeat stopped: another process took the store over. Null while this one holds it. */
  get lostError(): StoreOwnershipLostError | null {
    return this.takenOver;
  }

  /**
   * Refreshes the heartbeat now, waiting for the write lock if need be (at start, not while
   * serving), and throws StoreOwnershipLostError if another process took the store over meanwhile
   * (a migration that held the lock longer than the heartbeat's stale age, say).
   */
  confirm(): void {
    if (this.lostError) throw this.lostError;
    this.handle.pragma(`busy_timeout = ${LOCK_WAIT_MS}`);
    try {
      if (!this.refresh()) throw this.loseOwnership();
    } finally {
      this.handle.pragma('busy_timeout = 0');
    }
  }

  /**
   * Writes the heartbeat; false when the row is another process's now. Never waits for the write
   * lock: while another connection holds it, it fails at once (SQLITE_BUSY) and is retried shortly.
   */
  private refresh(): boolean {
    const now = this.now();
    const at = new Date(now).toISOString();
    const me = this.identity;
    let ok = this.update.run(at, me.instanceId).changes === 1;
    // No row (removed by hand): nobody claims the store, so it is ours again.
    ok ||=
      this.insert.run(me.instanceId, me.pid, me.hostname, me.pidScope, me.pidStarted, at, at).changes === 1;
    if (ok) this.lastBeat = now;
    return ok;
  }

  private schedule(ms: number): void {
    if (this.released || this.lostError) return;
    this.timer = setTimeout(() => this.beat(), ms);
    // The heartbeat never keeps the process alive.
    this.timer.unref();
  }

  private beat(): void {
    this.timer = null;
    if (this.released) return;
    let ok: boolean;
    try {
      ok = this.refresh();
    } catch (err) {
      this.failed(err);
      this.schedule(RETRY_MS);
      return;
    }
    if (!ok) {
      this.options.onLost(this.loseOwnership());
      return;
    }
    this.checkpointWhenIdle();
    this.schedule(this.heartbeatMs);
  }

  /**
   * The store's other connections checkpoint the WAL as they commit; with no commits (an idle
   * server), only heartbeats would grow it, a frame each, for ever. After IDLE_CHECKPOINT_BEATS
   * heartbeats with no other commit (data_version counts other connections' commits), a PASSIVE
   * checkpoint, which waits for nobody; the WAL then starts over at the next write.
   */
  private checkpointWhenIdle(): void {
    try {
      const version = this.handle.pragma('data_version', { simple: true }) as number;
      this.idleBeats = version === this.dataVersion ? this.idleBeats + 1 : 0;
      this.dataVersion = version;
      if (this.idleBeats < IDLE_CHECKPOINT_BEATS) return;
      this.idleBeats = 0;
      this.handle.pragma('wal_checkpoint(PASSIVE)');
    } catch (err) {
      // Tried again IDLE_CHECKPOINT_BEATS heartbeats later; the claim itself is unaffected.
      this.options.log().warn({ err }, `cannot checkpoint the SQLite database ${this.path}'s WAL`);
    }
  }

  /**
   * A refresh that failed, logged at most once a heartbeat interval. The write lock held by another
   * connection (a commit) is normal for a moment: logged once it lasts longer than an interval.
   */
  private failed(err: unknown): void {
    const now = this.now();
    const ageMs = now - this.lastBeat;
    if (isSqliteBusy(err) && ageMs < this.heartbeatMs) return;
    if (now - this.lastLogged < this.heartbeatMs) return;
    this.lastLogged = now;
    this.options
      .log()
      .error(
        { err, heartbeatAgeMs: ageMs },
        `cannot refresh this process's claim on the SQLite database ${this.path} (its heartbeat is ` +
          `${seconds(ageMs)} s old; another svc serve may take the store over at ${seconds(STALE_MS)} s); retrying`,
      );
  }

  private loseOwnership(): StoreOwnershipLostError {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    let by: OwnerRecord | undefined;
    try {
      by = this.handle.prepare(`select ${COLUMNS} from ${TABLE} where id = 1`).get() as
        | OwnerRecord
        | undefined;
    } catch {
      // Named as "another process".
    }
    this.takenOver ??= new StoreOwnershipLostError(this.path, by, this.now() - this.lastBeat);
    return this.takenOver;
  }

  /**
   * Removes this process's row (a restart then starts at once) and closes the connection. Never
   * throws: a row left behind is taken over anyway, at once on this host (its process is gone).
   */
  release(): void {
    if (this.released) return;
    this.released = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    try {
      this.handle.pragma(`busy_timeout = ${LOCK_WAIT_MS}`);
      if (!this.lostError) {
        this.handle
          .prepare(`delete from ${TABLE} where id = 1 and instance_id = ?`)
          .run(this.identity.instanceId);
      }
    } catch (err) {
      this.options
        .log()
        .warn({ err }, `cannot release this process's claim on the SQLite database ${this.path}`);
    } finally {
      try {
        this.handle.close();
      } catch {
        // Closed already.
      }
    }
  }
}
