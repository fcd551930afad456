import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { waitFor } from '../../test/streams.js';
import { openStore } from './db.js';
import { migrateToLatest } from './migrate.js';
import {
  claimStore,
  currentIdentity,
  HEARTBEAT_MS,
  IDLE_CHECKPOINT_BEATS,
  judge,
  type OwnerIdentity,
  type OwnerLog,
  type OwnerRecord,
  processAlive,
  STALE_MS,
  StoreOwnedError,
  type StoreOwner,
  type StoreOwnershipLostError,
} from './owner.js';

const LINUX = existsSync('/proc/self/stat');

const dirs: string[] = [];
const owners: StoreOwner[] = [];
const handles: SQLite.Database[] = [];
afterEach(() => {
  for (const o of owners.splice(0)) o.release();
  for (const h of handles.splice(0)) if (h.open) h.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A migrated store in a file of its own; its path. */
async function migratedFile(migrate = true): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-owner-'));
  dirs.push(dir);
  const path = join(dir, 'svc.db');
  const store = openStore(`sqlite:${path}`);
  try {
    if (migrate) await migrateToLatest(store);
  } finally {
    await store.close();
  }
  return path;
}

/** A direct connection to the file, for reading and planting rows. */
function direct(path: string): SQLite.Database {
  const h = new SQLite(path, { timeout: 5000 });
  handles.push(h);
  return h;
}

const rowOf = (path: string) =>
  direct(path).prepare('select * from serve_owner').all() as (OwnerRecord & { id: number })[];

interface Logged {
  level: 'warn' | 'error';
  msg: string;
}

function options(extra: { identity?: OwnerIdentity; heartbeatMs?: number } = {}) {
  const logged: Logged[] = [];
  const lost: StoreOwnershipLostError[] = [];
  const log: OwnerLog = {
    warn: (_o, msg) => logged.push({ level: 'warn', msg }),
    error: (_o, msg) => logged.push({ level: 'error', msg }),
  };
  return {
    logged,
    lost,
    options: { log: () => log, onLost: (e: StoreOwnershipLostError) => lost.push(e), ...extra },
  };
}

function claim(path: string, extra: Parameters<typeof options>[0] = {}) {
  const o = options(extra);
  const owner = claimStore(path, o.options);
  if (owner) owners.push(owner);
  return { owner, ...o };
}

const me: OwnerIdentity = {
  instanceId: 'me',
  pid: 4242,
  hostname: 'here',
  pidScope: 'boot-1 pid:[1]',
  pidStarted: '100',
};

function record(over: Partial<OwnerRecord> = {}): OwnerRecord {
  return {
    instance_id: 'other',
    pid: 77,
    hostname: 'here',
    pid_scope: 'boot-1 pid:[1]',
    pid_started: '50',
    started_at: '2030-01-01T00:00:00.000Z',
    heartbeat_at: new Date(NOW - 1000).toISOString(),
    ...over,
  };
}

const NOW = Date.parse('2030-01-01T01:00:00.000Z');
const alive = () => true;
const dead = () => false;

describe('judge', () => {
  it('takes a store without a row, or with its own row', () => {
    expect(judge(undefined, me, NOW, alive)).toEqual({ take: true, previous: null });
    expect(judge(record({ instance_id: 'me' }), me, NOW, alive)).toEqual({ take: true, previous: null });
  });

  it('takes over at once from a process of its own pid namespace that is gone', () => {
    const r = record();
    expect(judge(r, me, NOW, dead)).toEqual({ take: true, previous: { record: r, why: 'gone' } });
  });

  it('refuses a live owner with a recent heartbeat, and takes over one whose heartbeat is stale', () => {
    expect(judge(record(), me, NOW, alive)).toMatchObject({ take: false, ageMs: 1000 });
    // A pid that may have been reused (no start time): the heartbeat decides.
    const stale = record({ pid_started: null, heartbeat_at: new Date(NOW - STALE_MS).toISOString() });
    expect(judge(stale, me, NOW, alive)).toEqual({ take: true, previous: { record: stale, why: 'stale' } });
    const unreadable = record({ pid_started: null, heartbeat_at: 'yesterday' });
    expect(judge(unreadable, me, NOW, alive)).toMatchObject({ take: true, previous: { why: 'stale' } });
  });

  it('never takes over a live process of its own pid namespace, however old its heartbeat', () => {
    // Busy or stopped (SIGSTOP) for longer than the stale age: the process, its start time
    // matching, still serves the store.
    for (const heartbeat_at of [new Date(NOW - 10 * STALE_MS).toISOString(), 'yesterday']) {
      expect(judge(record({ heartbeat_at }), me, NOW, alive)).toMatchObject({ take: false });
    }
  });

  it('never checks a pid of another host or another pid namespace: the heartbeat decides', () => {
    // Another host; or this host's name in another container (its own pid 1, say): a pid that means
    // nothing here, whatever it names here.
    for (const r of [
      record({ hostname: 'there', pid_scope: 'boot-2 pid:[1]' }),
      record({ pid_scope: 'boot-1 pid:[2]' }),
      record({ pid: me.pid, pid_scope: 'boot-1 pid:[2]', pid_started: me.pidStarted }),
      record({ pid_scope: null }),
    ]) {
      expect(judge(r, me, NOW, dead)).toMatchObject({ take: false });
      const stale = { ...r, heartbeat_at: new Date(NOW - STALE_MS - 1).toISOString() };
      expect(judge(stale, me, NOW, dead)).toMatchObject({ take: true, previous: { why: 'stale' } });
    }
  });

  it('without pid namespaces (not Linux), goes by the host name', () => {
    const bare = { ...me, pidScope: null, pidStarted: null };
    const r = record({ pid_scope: null, pid_started: null });
    expect(judge(r, bare, NOW, dead)).toMatchObject({ take: true, previous: { why: 'gone' } });
    expect(judge({ ...r, hostname: 'there' }, bare, NOW, dead)).toMatchObject({ take: false });
  });
});

describe.skipIf(!LINUX)('processAlive', () => {
  it('tells a live process from one gone, and from a pid reused by another process', async () => {
    const self = currentIdentity();
    expect(self.pidScope).toMatch(/^\S+ pid:\[\d+\]$/);
    expect(processAlive(process.ppid, null)).toBe(true);
    // This process, started at another time: a pid reused.
    expect(processAlive(process.pid, self.pidStarted)).toBe(true);
    expect(processAlive(process.pid, '1')).toBe(false);
    expect(processAlive(0, null)).toBe(false);
    expect(processAlive(-1, null)).toBe(false);
    const child = spawn(process.execPath, ['-e', '']);
    const pid = child.pid!;
    await new Promise((r) => child.once('exit', r));
    expect(processAlive(pid, null)).toBe(false);
  });
});

describe('claimStore', () => {
  it('finds no table on a store not migrated yet, and claims nothing', async () => {
    const path = await migratedFile(false);
    expect(claim(path).owner).toBeNull();
  });

  it('records the process; another process is refused while its heartbeat is recent, naming it', async () => {
    const path = await migratedFile();
    const { owner } = claim(path);
    expect(owner!.takeover()).toBeNull();
    const [row] = rowOf(path);
    expect(row).toMatchObject({ id: 1, pid: process.pid, instance_id: owner!.identity.instanceId });
    // A process elsewhere (its pid cannot be checked from there).
    const elsewhere = { ...currentIdentity(), hostname: 'elsewhere', pidScope: 'boot-x pid:[9]' };
    let refused: unknown;
    try {
      claim(path, { identity: elsewhere });
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(StoreOwnedError);
    expect((refused as Error).message.replace(/heartbeat \d+ s ago/, 'heartbeat N s ago')).toBe(
      `the SQLite database ${path} (SVC_DATABASE_URL) is already served by svc serve pid ${process.pid} ` +
        `on host ${row!.hostname} since ${row!.started_at} (last heartbeat N s ago): one SQLite file is ` +
        'served by one process; stop that one first, or run several instances on PostgreSQL (docs/deploy.md)',
    );
    // Nothing changed.
    expect(rowOf(path)).toEqual([row]);
  });

  it('takes over a stale row from another host, saying so', async () => {
    const path = await migratedFile();
    const old = new Date(Date.now() - STALE_MS - 5000).toISOString();
    direct(path)
      .prepare(
        `insert into serve_owner (id, instance_id, pid, hostname, pid_scope, pid_started, started_at, heartbeat_at)
         values (1, 'x', 1, 'elsewhere', 'boot-x pid:[9]', null, ?, ?)`,
      )
      .run(old, old);
    const { owner } = claim(path);
    expect(owner!.takeover()).toBe(
      `took over the SQLite database ${path} from svc serve pid 1 on host elsewhere: its heartbeat stopped at ${old}, over 15 s ago`,
    );
    expect(rowOf(path)[0]).toMatchObject({ pid: process.pid, instance_id: owner!.identity.instanceId });
  });

  it('releases: the row is gone and the next claim takes the store as free', async () => {
    const path = await migratedFile();
    const { owner } = claim(path);
    owner!.release();
    expect(rowOf(path)).toEqual([]);
    expect(claim(path).owner!.takeover()).toBeNull();
  });
});

describe('the heartbeat', () => {
  it('keeps the WAL of an idle store from growing: a checkpoint after heartbeats with no other commit', async () => {
    const path = await migratedFile();
    vi.useFakeTimers();
    try {
      const { owner } = claim(path, { heartbeatMs: HEARTBEAT_MS });
      expect(owner).not.toBeNull();
      // An hour of heartbeats on a store nobody else writes.
      vi.advanceTimersByTime(HEARTBEAT_MS * 720);
    } finally {
      vi.useRealTimers();
    }
    // Without checkpoints, 720 frames of a page each (about 3 MB); with them, about a dozen.
    const pageSize = direct(path).pragma('page_size', { simple: true }) as number;
    expect(statSync(`${path}-wal`).size).toBeLessThan((IDLE_CHECKPOINT_BEATS + 4) * (pageSize + 24) + 32);
  });

  it('refreshes the row', async () => {
    const path = await migratedFile();
    const { owner } = claim(path, { heartbeatMs: 20 });
    const first = rowOf(path)[0]!.heartbeat_at;
    await waitFor(() => rowOf(path)[0]!.heartbeat_at > first, 'a newer heartbeat');
    expect(rowOf(path)[0]!.instance_id).toBe(owner!.identity.instanceId);
  });

  it('never waits for the write lock: while another connection holds it, it fails at once, is logged, and resumes', async () => {
    const path = await migratedFile();
    const { owner, logged } = claim(path, { heartbeatMs: 20 });
    const locker = direct(path);
    const before = rowOf(path)[0]!.heartbeat_at;
    locker.exec('BEGIN IMMEDIATE');
    // The event loop keeps turning while the heartbeat runs into the lock (5 s if it waited).
    let last = performance.now();
    let gap = 0;
    const tick = setInterval(() => {
      const now = performance.now();
      gap = Math.max(gap, now - last);
      last = now;
    }, 5);
    try {
      await waitFor(() => logged.length > 0, 'a failed refresh logged');
    } finally {
      clearInterval(tick);
      locker.exec('ROLLBACK');
    }
    expect(gap).toBeLessThan(1000);
    expect(logged[0]!.level).toBe('error');
    expect(logged[0]!.msg).toMatch(
      new RegExp(
        `^cannot refresh this process's claim on the SQLite database ${path} \\(its heartbeat is \\d+ s old`,
      ),
    );
    await waitFor(() => rowOf(path)[0]!.heartbeat_at > before, 'the heartbeat refreshed again');
    expect(owner!.lost).toBe(false);
  });

  it('notices a takeover: stops, says who took the store, releases nothing', async () => {
    const path = await migratedFile();
    const { owner, lost } = claim(path, { heartbeatMs: 20 });
    direct(path)
      .prepare(`update serve_owner set instance_id = 'thief', pid = 99, hostname = 'elsewhere'`)
      .run();
    await waitFor(() => lost.length > 0, 'the takeover noticed');
    expect(lost[0]!.message).toMatch(
      new RegExp(
        `^svc serve pid 99 on host elsewhere took over the SQLite database ${path} \\(this process's last heartbeat was \\d+ s old, older than 15 s\\): this instance stops$`,
      ),
    );
    expect(owner!.lost).toBe(true);
    expect(() => owner!.confirm()).toThrow(lost[0]!.message);
    owner!.release();
    expect(rowOf(path)[0]!.instance_id).toBe('thief');
    expect(lost).toHaveLength(1);
  });
});
