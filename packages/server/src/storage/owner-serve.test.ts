import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import { freshDatabase, JWT_SECRET, TEST_PG_URL, type TestDatabase } from '../../test/helpers.js';
import { waitFor } from '../../test/streams.js';
import { loadConfig } from '../config.js';
import { type RunningServer, startServer } from '../server.js';
import { openStore } from './db.js';
import { migrateToLatest } from './migrate.js';
import { STALE_MS, StoreOwnedError } from './owner.js';

/**
 * One `svc serve` per SQLite file (storage/owner.ts), with real processes: a second refuses to
 * start and the first keeps serving; after the first stops (SIGTERM) or dies (SIGKILL), the next
 * starts at once; a row of another host is refused while its heartbeat is recent, taken over once it
 * is stale. Always on a SQLite file, also when the suite runs on PostgreSQL.
 */

interface Served {
  child: ChildProcess;
  output(): string;
  stderr(): string;
  /** The address once it answers; rejects if it exits first. */
  listening: Promise<string>;
  exited: Promise<number | null>;
}

const children: ChildProcess[] = [];
const dirs: string[] = [];

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A fresh folder for a SQLite file; the file's path. */
function freshFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-owner-serve-'));
  dirs.push(dir);
  return join(dir, 'svc.db');
}

/** Without Redis: one process per store is what the claim is for. */
function env(path: string): NodeJS.ProcessEnv {
  const { SVC_REDIS_URL: _redis, ...rest } = process.env;
  return {
    ...rest,
    PORT: '0',
    HOST: '127.0.0.1',
    SVC_LOG_LEVEL: 'info',
    SVC_DATABASE_URL: `sqlite:${path}`,
    SVC_JWT_SECRET: JWT_SECRET,
  };
}

function serve(path: string): Served {
  const child = spawn(process.execPath, [...SVC_FLAGS, SVC_BIN, 'serve'], {
    env: env(path),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  let stderr = '';
  child.stdout!.on('data', (d) => {
    output += d;
  });
  child.stderr!.on('data', (d) => {
    output += d;
    stderr += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const listening = new Promise<string>((resolve, reject) => {
    let seen = false;
    const check = () => {
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (!m || seen) return;
      seen = true;
      // Answered: past its start, its signal handlers in place.
      fetch(`${m[1]}/healthz`).then(
        (res) => (res.ok ? resolve(m[1]!) : reject(new Error(`GET /healthz answered ${res.status}`))),
        reject,
      );
    };
    child.stdout!.on('data', check);
    child.stderr!.on('data', check);
    exited.then((code) => reject(new Error(`svc serve exited with ${code}:\n${output}`)));
  });
  // Not every test waits for both.
  listening.catch(() => {});
  return { child, output: () => output, stderr: () => stderr, listening, exited };
}

/** Sends `signal` and resolves with the exit code. */
async function stop(s: Served, signal: NodeJS.Signals): Promise<number | null> {
  s.child.kill(signal);
  return s.exited;
}

function svc(path: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [...SVC_FLAGS, SVC_BIN, ...args], { env: env(path) }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const rows = (path: string) => {
  const h = new SQLite(path, { readonly: true });
  try {
    return h.prepare('select * from serve_owner').all() as { pid: number; hostname: string }[];
  } finally {
    h.close();
  }
};

async function migrated(path: string): Promise<void> {
  const store = openStore(`sqlite:${path}`);
  try {
    await migrateToLatest(store);
  } finally {
    await store.close();
  }
}

const quote = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('svc serve on a SQLite file another svc serve serves', () => {
  it('refuses to start, naming the file and the process; the first keeps serving; other commands work', async () => {
    const path = freshFile();
    const first = serve(path);
    const url = await first.listening;

    // Meanwhile, commands other than serve neither need nor take the store's claim.
    const second = serve(path);
    const commands = Promise.all([svc(path, 'migrate'), svc(path, 'keys', 'list')]);
    expect(await second.exited).toBe(1);
    expect(second.stderr()).toMatch(
      new RegExp(
        `^svc: the SQLite database ${quote(path)} \\(SVC_DATABASE_URL\\) is already served by svc serve ` +
          `pid ${first.child.pid} on host ${quote(hostname())} since \\S+Z \\(last heartbeat \\d+ s ago\\): ` +
          'one SQLite file is served by one process; stop that one first, or run several instances on ' +
          'PostgreSQL \\(docs/deploy\\.md\\)\\n$',
      ),
    );
    const [migrate, keys] = await commands;
    expect(migrate).toMatchObject({ code: 0, stdout: 'already up to date\n' });
    expect(keys.code).toBe(0);
    expect(rows(path)).toEqual([expect.objectContaining({ pid: first.child.pid })]);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);

    // A clean stop releases the store: the next one starts at once, with nothing to take over.
    expect(await stop(first, 'SIGTERM')).toBe(0);
    expect(rows(path)).toEqual([]);
    const third = serve(path);
    await third.listening;
    expect(third.output()).not.toContain('took over');

    // Killed: its row stays, and the next one on this host takes over at once (its process is gone).
    const killedPid = third.child.pid;
    expect(await stop(third, 'SIGKILL')).toBeNull();
    const fourth = serve(path);
    await fourth.listening;
    expect(fourth.output()).toContain(
      `took over the SQLite database ${path} from svc serve pid ${killedPid} on host ${hostname()}: its process is gone`,
    );
    expect(rows(path)).toEqual([expect.objectContaining({ pid: fourth.child.pid })]);
    expect(await stop(fourth, 'SIGTERM')).toBe(0);
    // Four servers and two commands started one after another: seconds each on a loaded machine.
  }, 120_000);

  it('of two started at once, exactly one serves', async () => {
    const path = freshFile();
    await migrated(path);
    const pair = [serve(path), serve(path)];
    const outcomes = await Promise.all(
      pair.map((s) =>
        Promise.race([s.listening.then(() => 'serving' as const), s.exited.then((code) => code)]),
      ),
    );
    expect([...outcomes].sort()).toEqual([1, 'serving']);
    const loser = pair[outcomes.indexOf(1)]!;
    const winner = pair[outcomes.indexOf('serving')]!;
    expect(loser.stderr()).toMatch(/^svc: the SQLite database .* is already served by svc serve pid \d+/);
    expect(await stop(winner, 'SIGTERM')).toBe(0);
  }, 60_000);

  it('refuses while another host keeps the heartbeat fresh; takes over once it is stale', async () => {
    const path = freshFile();
    await migrated(path);
    const other = new SQLite(path, { timeout: 5000 });
    const started = new Date(Date.now() - 3_600_000).toISOString();
    other
      .prepare(
        `insert into serve_owner (id, instance_id, pid, hostname, pid_scope, pid_started, started_at, heartbeat_at)
         values (1, 'remote', 1, 'db-host-2', 'another-boot pid:[1]', null, ?, ?)`,
      )
      .run(started, new Date().toISOString());
    // The other host's heartbeat, as long as the refused start takes.
    const beat = setInterval(
      () => other.prepare('update serve_owner set heartbeat_at = ?').run(new Date().toISOString()),
      500,
    );
    try {
      const refused = serve(path);
      expect(await refused.exited).toBe(1);
      expect(refused.stderr()).toMatch(
        new RegExp(
          `^svc: the SQLite database ${quote(path)} \\(SVC_DATABASE_URL\\) is already served by svc serve ` +
            `pid 1 on host db-host-2 since ${quote(started)} \\(last heartbeat \\d+ s ago\\)`,
        ),
      );
    } finally {
      clearInterval(beat);
    }
    // That host stopped refreshing (gone, or cut off) three heartbeats ago.
    const last = new Date(Date.now() - STALE_MS - 1000).toISOString();
    other.prepare('update serve_owner set heartbeat_at = ?').run(last);
    other.close();
    const next = serve(path);
    await next.listening;
    expect(next.output()).toContain(
      `took over the SQLite database ${path} from svc serve pid 1 on host db-host-2: its heartbeat stopped at ${last}`,
    );
    expect(rows(path)).toEqual([expect.objectContaining({ pid: next.child.pid, hostname: hostname() })]);
    expect(await stop(next, 'SIGTERM')).toBe(0);
  }, 60_000);
});

describe('startServer and the claim', () => {
  const running: RunningServer[] = [];
  let database: TestDatabase | null = null;
  afterEach(async () => {
    for (const s of running.splice(0)) await s.stop().catch(() => {});
    await database?.drop();
    database = null;
  });

  const config = (databaseUrl: string) => ({
    ...loadConfig({}),
    jwtSecret: JWT_SECRET,
    databaseUrl,
    logLevel: 'silent' as const,
    port: 0,
    host: '127.0.0.1',
  });

  it('refuses a second server on one file in one process too; once the first stops, it starts', async () => {
    const path = freshFile();
    running.push(await startServer(config(`sqlite:${path}`)));
    const second = await startServer(config(`sqlite:${path}`)).then(
      (s) => {
        running.push(s);
        return 'started';
      },
      (err: unknown) => err,
    );
    expect(second).toBeInstanceOf(StoreOwnedError);
    expect((second as Error).message).toContain(`is already served by svc serve pid ${process.pid}`);
    await running.pop()!.stop();
    running.push(await startServer(config(`sqlite:${path}`)));
  });

  it('stops a server whose store another process took over, saying who', async () => {
    const steal = (file: string) => {
      const h = new SQLite(file, { timeout: 5000 });
      try {
        h.prepare(`update serve_owner set instance_id = 'thief', pid = 1, hostname = 'db-host-2'`).run();
      } finally {
        h.close();
      }
    };
    const lost: Error[] = [];
    const reportingPath = freshFile();
    const reporting = await startServer(config(`sqlite:${reportingPath}`), {
      heartbeatMs: 20,
      onOwnershipLost: (err) => lost.push(err),
    });
    running.push(reporting);
    // Without onOwnershipLost, the server stops itself.
    const stoppingPath = freshFile();
    const stopping = await startServer(config(`sqlite:${stoppingPath}`), { heartbeatMs: 20 });
    running.push(stopping);
    steal(reportingPath);
    steal(stoppingPath);
    await waitFor(() => lost.length > 0, 'the takeover reported');
    expect(lost[0]!.message).toMatch(
      /^svc serve pid 1 on host db-host-2 took over the SQLite database .* this instance stops$/,
    );
    // The one reporting it serves until its caller stops it (svc serve: as on SIGTERM, exit 1).
    expect((await fetch(`${reporting.url}/healthz`)).status).toBe(200);
    await waitFor(
      () =>
        fetch(`${stopping.url}/healthz`).then(
          () => false,
          () => true,
        ),
      'the other server stopped',
    );
    // Neither removes the row it no longer holds.
    await reporting.stop();
    await stopping.stop();
    for (const file of [reportingPath, stoppingPath]) {
      expect(rows(file)).toEqual([expect.objectContaining({ hostname: 'db-host-2' })]);
    }
    expect(lost).toHaveLength(1);
  });

  const urls: [string, () => Promise<string>][] = [['a store in memory', async () => 'sqlite::memory:']];
  if (TEST_PG_URL) {
    urls.push([
      'PostgreSQL',
      async () => {
        database = await freshDatabase();
        return database.url;
      },
    ]);
  }
  it.each(urls)('does not apply to %s: two servers start', async (_what, url) => {
    const databaseUrl = await url();
    running.push(await startServer(config(databaseUrl)));
    running.push(await startServer(config(databaseUrl)));
    for (const s of running) expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
  });
});
