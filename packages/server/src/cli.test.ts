import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { jwtVerify } from 'jose';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../test/bin.js';
import { useTestApp } from '../test/fixture.js';
import { createTenant, freshDatabase, keyHeader, TEST_PG_URL, type Tenant } from '../test/helpers.js';
import { openStore } from './storage/db.js';

const run = promisify(execFile);
/** SVC_FLAGS that work from any directory: tsx found where this repository keeps it, not in the cwd. */
const SVC_FLAGS_ANYWHERE = SVC_FLAGS.map((flag) =>
  flag === 'tsx' ? pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href : flag,
);
const dir = mkdtempSync(join(tmpdir(), 'svc-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function env(extra: Record<string, string> = {}) {
  const { SVC_JWT_SECRET: _a, SVC_JWT_JWKS_URL: _b, ...rest } = process.env;
  return { ...rest, SVC_DATABASE_URL: `sqlite:${join(dir, 'svc.db')}`, ...extra };
}

/**
 * Runs `start` for every case, four at a time, and answers in the cases' order: two dozen processes
 * started at once on a busy machine could each miss their timeout.
 */
async function fourAtATime<C, R>(cases: readonly C[], start: (c: C) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < cases.length; i = next++) results[i] = await start(cases[i]!);
  };
  await Promise.all([lane(), lane(), lane(), lane()]);
  return results;
}

describe('svc command', () => {
  it('migrates, then reports nothing left to do', async () => {
    const first = await run('node', [...SVC_FLAGS, SVC_BIN, 'migrate'], { env: env() });
    expect(first.stdout).toMatch(/applied: 0001_tenancy/);
    const second = await run('node', [...SVC_FLAGS, SVC_BIN, 'migrate'], { env: env() });
    expect(second.stdout).toMatch(/already up to date/);
  });

  it('prints a token signed with the secret generated beside the embedded store', async () => {
    const { stdout } = await run('node', [...SVC_FLAGS, SVC_BIN, 'token', '--sub', 'alice', '--ttl', '10m'], {
      env: env(),
    });
    const secretFile = join(dir, 'jwt-secret');
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const secret = readFileSync(secretFile, 'utf8').trim();
    expect(secret.length).toBeGreaterThanOrEqual(40);
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode(secret));
    expect(payload.sub).toBe('alice');
    expect(payload.exp! - payload.iat!).toBe(600);
  });

  it('uses SVC_JWT_SECRET when set, without the store (here one that cannot be reached)', async () => {
    const secret = 'configured-secret-of-at-least-32-bytes';
    const { stdout } = await run('node', [...SVC_FLAGS, SVC_BIN, 'token', '--sub', 'bob'], {
      env: env({ SVC_JWT_SECRET: secret, SVC_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' }),
    });
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode(secret));
    expect(payload.sub).toBe('bob');
  });

  it('mints tokens living 1 second to 366 days', async () => {
    const [year, second] = await Promise.all(
      ['366d', '1s'].map((ttl) =>
        run('node', [...SVC_FLAGS, SVC_BIN, 'token', '--sub', 'carol', '--ttl', ttl], { env: env() }),
      ),
    );
    const secret = new TextEncoder().encode(readFileSync(join(dir, 'jwt-secret'), 'utf8').trim());
    const { payload } = await jwtVerify(year!.stdout.trim(), secret);
    expect(payload.exp! - payload.iat!).toBe(366 * 86_400);
    const short = JSON.parse(Buffer.from(second!.stdout.trim().split('.')[1]!, 'base64url').toString());
    expect(short.exp - short.iat).toBe(1);
  });

  it('exits 2 on every usage error, naming what is wrong, and runs nothing', async () => {
    // A store of its own: a command that ran anyway would create it (and serve would keep running).
    const store = join(dir, 'usage', 'svc.db');
    const cases: [string[], string][] = [
      [['token'], '--sub USER is required'],
      [['token', '--sub', 'e'.repeat(201)], '--sub must be 1-200 characters'],
      [['token', '--sub', 'alice', '--ttl', '0'], '--ttl must be between 1s and 366d, got "0"'],
      [['token', '--sub', 'alice', '--ttl', '99999999999999d'], '--ttl must be between 1s and 366d'],
      [['token', '--sub', 'alice', '--ttl', '367d'], '--ttl must be between 1s and 366d'],
      [['token', '--sub', 'alice', '--ttl', '1y'], '--ttl must be a duration'],
      [['token', '--sub', 'alice', '--bogus'], "Unknown option '--bogus'"],
      [['token', '--sub', 'alice', 'extra'], 'unexpected argument "extra"'],
      [['token', '--sub'], "Option '--sub <value>' argument missing"],
      [['token', '--sub', 'alice', '--sub', 'bob'], '--sub is given more than once; it takes one value'],
      [
        ['token', '--sub=alice', '--ttl', '1h', '--ttl=2h'],
        '--ttl is given more than once; it takes one value',
      ],
      [['login-link'], '--sub USER is required'],
      [['login-link', '--sub', 'alice', '--ttl', '2d'], '--ttl must be between 1s and 1d'],
      [['login-link', '--sub', 'alice', '--ttl', '0'], '--ttl must be between 1s and 1d'],
      [['login-link', '--sub', 'bob', '--sub', 'bob'], '--sub is given more than once; it takes one value'],
      [['keys'], 'a keys command is required: list or rotate'],
      [['keys', 'frob'], 'unknown keys command "frob"'],
      [['keys', 'list', 'extra'], 'unexpected argument "extra"'],
      [['keys', 'rotate', '--force'], "Unknown option '--force'"],
      [['serve', '--port', '19130'], "Unknown option '--port'"],
      [['serve', 'now'], 'unexpected argument "now"'],
      [['migrate', '--bogus'], "Unknown option '--bogus'"],
      [['migrate', 'a', 'b'], 'unexpected arguments "a" "b"'],
      [['help', 'frob'], 'unknown command "frob"'],
      [['frobnicate'], 'unknown command "frobnicate"'],
    ];
    type Result = { code: number | null; stdout: string; stderr: string };
    const results = await fourAtATime(cases, ([args]) =>
      run('node', [...SVC_FLAGS, SVC_BIN, ...args], {
        env: env({ SVC_DATABASE_URL: `sqlite:${store}`, PORT: '0' }),
        timeout: 30_000,
      }).then(
        (r) => ({ code: 0 as number | null, stdout: r.stdout, stderr: r.stderr }),
        (e: Result) => e,
      ),
    );
    cases.forEach(([args, message], i) => {
      const r = results[i]!;
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: '' });
      expect(r.stderr, args.join(' ')).toContain(`svc: ${message}`);
      // The command's usage line follows the message.
      const usage =
        args[0] === 'frobnicate' || args[0] === 'help' ? 'Usage: svc <command>' : `usage: svc ${args[0]}`;
      expect(r.stderr, args.join(' ')).toContain(usage);
    });
    expect(existsSync(store)).toBe(false);
  }, 200_000);

  it('refuses a store in memory for commands whose work the store keeps', async () => {
    const results = await Promise.all(
      [
        ['token', '--sub', 'alice'],
        ['login-link', '--sub', 'alice'],
        ['keys', 'rotate'],
      ].map((args) =>
        run('node', [...SVC_FLAGS, SVC_BIN, ...args], {
          env: env({ SVC_DATABASE_URL: 'sqlite::memory:' }),
        }).catch((e) => e),
      ),
    );
    for (const r of results) {
      expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 1, stdout: '' });
      expect(r.stderr).toContain(
        'svc: SVC_DATABASE_URL is sqlite::memory:, a store that ends with this command',
      );
    }
    // With SVC_JWT_SECRET the token does not depend on the store.
    const secret = 'configured-secret-of-at-least-32-bytes';
    const { stdout } = await run('node', [...SVC_FLAGS, SVC_BIN, 'token', '--sub', 'alice'], {
      env: env({ SVC_DATABASE_URL: 'sqlite::memory:', SVC_JWT_SECRET: secret }),
    });
    expect((await jwtVerify(stdout.trim(), new TextEncoder().encode(secret))).payload.sub).toBe('alice');
  });

  it('prints the usage of a command named after help', async () => {
    const { stdout } = await run('node', [...SVC_FLAGS, SVC_BIN, 'help', 'keys'], { env: env() });
    expect(stdout).toMatch(/^usage: svc keys list\|rotate/);
    // help is a command like the others: `svc help help` and `svc help --help` print its usage.
    const results = await Promise.all(
      [
        ['help', 'help'],
        ['help', '--help'],
        ['help', '-h'],
        ['--help', '-h'],
      ].map((args) =>
        run('node', [...SVC_FLAGS, SVC_BIN, ...args], { env: env() }).then(
          (r) => ({ args, code: 0 as number | null, stdout: r.stdout, stderr: r.stderr }),
          (e: { code: number | null; stdout: string; stderr: string }) => ({ args, ...e }),
        ),
      ),
    );
    for (const r of results) {
      expect({ args: r.args, code: r.code, stderr: r.stderr }).toEqual({ args: r.args, code: 0, stderr: '' });
      expect(r.stdout).toMatch(/^usage: svc help \[command\]\n/);
    }
  });

  it('refuses a signing key overlap past its bound before rotating', async () => {
    const own = join(dir, 'overlap');
    const r = await run('node', [...SVC_FLAGS, SVC_BIN, 'keys', 'rotate'], {
      env: env({
        SVC_DATABASE_URL: `sqlite:${join(own, 'svc.db')}`,
        SVC_SIGNING_KEY_OVERLAP: '99999999999d',
      }),
    }).catch((e) => e);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'svc: SVC_SIGNING_KEY_OVERLAP must be between 0s and 3650d, got "99999999999d"',
    );
    // Nothing was written: the key set (signing-keys.json beside the store) was never opened.
    expect(existsSync(join(own, 'signing-keys.json'))).toBe(false);
  });

  it('rotates a store without a signing key to one key, and a store with one to the next', async () => {
    const db = await freshDatabase();
    try {
      const svc = (...args: string[]) =>
        run('node', [...SVC_FLAGS, SVC_BIN, ...args], { env: env({ SVC_DATABASE_URL: db.url }) });
      // The commands administer an existing store: the server (or svc migrate) creates it.
      await svc('migrate');
      // Listing a store without a key says so and creates none (the rotation below finds none).
      const none = await svc('keys', 'list');
      expect(none).toEqual({
        stdout: '',
        stderr:
          'the store has no signing key yet: the server creates one on its first start, or run svc keys rotate\n',
      });
      if (!TEST_PG_URL) {
        expect(
          readdirSync(dirname(db.url.slice('sqlite:'.length))).filter((f) => !f.startsWith('svc.db')),
        ).toEqual([]);
      }
      const first = await svc('keys', 'rotate');
      const kid = /^new signing key ([A-Za-z0-9_-]{43})\n/.exec(first.stdout)?.[1];
      expect(first.stdout).toBe(
        `new signing key ${kid}\nthe store had no signing key: this is its first, and the only one created\n`,
      );
      // Exactly one key: none was generated on opening the store only to be retired at once.
      const once = (await svc('keys', 'list')).stdout.trim().split('\n');
      expect(once).toHaveLength(1);
      expect(once[0]!.startsWith(`${kid}  active  generated  created `)).toBe(true);

      const second = await svc('keys', 'rotate');
      const next = /^new signing key ([A-Za-z0-9_-]{43})\n/.exec(second.stdout)?.[1];
      expect(next).toBeDefined();
      expect(next).not.toBe(kid);
      expect(second.stdout).toMatch(
        new RegExp(
          `^new signing key ${next}\nprevious key ${kid} stays published until \\S+\nrunning instances pick the new key up within 10 seconds\n$`,
        ),
      );
      const twice = (await svc('keys', 'list')).stdout.trim().split('\n');
      expect(twice).toHaveLength(2);
      expect(twice[0]!.startsWith(`${next}  active  generated  created `)).toBe(true);
      expect(twice[1]!.startsWith(`${kid}  retired  generated  created `)).toBe(true);
      expect(twice[1]).toContain(' published until ');
    } finally {
      await db.drop();
    }
  });

  /** Every command that works on the server's store (not serve, migrate, or receipts verify). */
  const ADMIN_COMMANDS = [
    ['token', '--sub', 'alice'],
    ['login-link', '--sub', 'alice'],
    ['keys', 'list'],
    ['keys', 'rotate'],
  ];
  type Outcome = { code: number | null; stdout: string; stderr: string };
  const outcomeOf = (args: string[], options: { env: NodeJS.ProcessEnv; cwd?: string }) =>
    run('node', [...SVC_FLAGS_ANYWHERE, SVC_BIN, ...args], { ...options, timeout: 30_000 }).then(
      (r) => ({ code: 0 as number | null, stdout: r.stdout, stderr: r.stderr }),
      (e: Outcome) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
    );

  it('refuses to administer a SQLite store that does not exist, names its path, and creates nothing', async () => {
    // From another directory, with the default (relative) URL; a mistyped file name in an existing
    // folder; a path whose folder does not exist either.
    const elsewhere = mkdtempSync(join(dir, 'elsewhere-'));
    const folder = mkdtempSync(join(dir, 'typo-'));
    const { SVC_DATABASE_URL: _url, ...noUrl } = env();
    const places = [
      { env: noUrl, cwd: elsewhere, path: join(elsewhere, 'data', 'svc.db'), relative: true },
      { env: env({ SVC_DATABASE_URL: `sqlite:${join(folder, 'svc.bd')}` }), path: join(folder, 'svc.bd') },
      {
        env: env({ SVC_DATABASE_URL: `sqlite:${join(dir, 'no-such-folder', 'svc.db')}` }),
        path: join(dir, 'no-such-folder', 'svc.db'),
      },
    ];
    const cases = places.flatMap((place) => ADMIN_COMMANDS.map((args) => ({ place, args })));
    const results = await fourAtATime(cases, ({ place, args }) =>
      outcomeOf(args, { env: place.env, ...(place.cwd ? { cwd: place.cwd } : {}) }),
    );
    cases.forEach(({ place, args }, i) => {
      const r = results[i]!;
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 1, stdout: '' });
      expect(r.stderr, args.join(' ')).toContain(`svc: there is no store at ${place.path} (SVC_DATABASE_URL`);
      expect(r.stderr, args.join(' ')).toContain(
        "nothing was created; point SVC_DATABASE_URL at the server's store, or run svc migrate (or start the server) to create a new one",
      );
      if (place.relative) {
        expect(r.stderr).toContain(`relative to the current directory ${place.cwd}`);
      }
      // One line, no stack trace.
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
    });
    // No store, no -wal/-shm, no secret or key file, no folder.
    expect(readdirSync(elsewhere)).toEqual([]);
    expect(readdirSync(folder)).toEqual([]);
    expect(existsSync(join(dir, 'no-such-folder'))).toBe(false);
  }, 200_000);

  it('refuses to administer a store not migrated to this version, and migrates nothing', async () => {
    const db = await freshDatabase();
    const svc = (...args: string[]) => outcomeOf(args, { env: env({ SVC_DATABASE_URL: db.url }) });
    const migrations = async () => {
      const store = openStore(db.url, { existing: true });
      try {
        const { rows } = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(
          store.db,
        );
        return rows.map((r) => r.name);
      } catch {
        return null;
      } finally {
        await store.close();
      }
    };
    const changed = async (statement: (name: string) => ReturnType<typeof sql>, name: string) => {
      const store = openStore(db.url, { existing: true });
      try {
        await statement(name).execute(store.db);
      } finally {
        await store.close();
      }
    };
    const refusedBy = async (...messages: string[]) => {
      const results = await fourAtATime(ADMIN_COMMANDS, (args) => svc(...args));
      ADMIN_COMMANDS.forEach((args, i) => {
        const r = results[i]!;
        expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 1, stdout: '' });
        for (const message of messages) expect(r.stderr, args.join(' ')).toContain(message);
        expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      });
    };
    try {
      const where = TEST_PG_URL ? 'the database at SVC_DATABASE_URL' : 'the store at';
      if (!TEST_PG_URL) {
        // An empty file where the store should be (a stray one, or another program's).
        const path = db.url.slice('sqlite:'.length);
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(path, '');
      }
      await refusedBy(
        `svc: ${where}`,
        "holds no svc tables: it is not the server's store, or it was never migrated; point SVC_DATABASE_URL at the server's store, or run svc migrate to set this one up",
      );
      expect(await migrations()).toBeNull();
      if (!TEST_PG_URL) {
        // The file is left as it was (not even switched to WAL), with nothing beside it: no
        // secret, no signing keys, no -wal or -shm.
        const path = db.url.slice('sqlite:'.length);
        expect(statSync(path).size).toBe(0);
        expect(readdirSync(dirname(path))).toEqual(['svc.db']);
      }

      // A store one migration behind this version of svc (an upgrade not yet migrated).
      expect((await svc('migrate')).code).toBe(0);
      const all = (await migrations())!;
      const last = all.at(-1)!;
      await changed((name) => sql`delete from kysely_migration where name = ${name}`, last);
      await refusedBy(
        `is not migrated to this version of svc (1 migration pending: ${last}): run svc migrate, or start the server (it migrates on start), then try again`,
      );
      expect(await migrations()).toEqual(all.slice(0, -1));

      // A store migrated by a newer svc.
      const record = (name: string) =>
        sql`insert into kysely_migration (name, timestamp) values (${name}, ${new Date().toISOString()})`;
      await changed(record, last);
      await changed(record, '9999_from_a_newer_svc');
      await refusedBy(
        'was migrated by a newer version of svc (its migration 9999_from_a_newer_svc is unknown to this one): run that version of svc',
      );

      // Migrated to this version: the commands run.
      await changed(
        (name) => sql`delete from kysely_migration where name = ${name}`,
        '9999_from_a_newer_svc',
      );
      const token = await svc('token', '--sub', 'alice');
      expect({ code: token.code, stderr: token.stderr }).toEqual({ code: 0, stderr: '' });
      expect(token.stdout).toMatch(/^ey/);
      expect(await migrations()).toEqual(all);
    } finally {
      await db.drop();
    }
  }, 200_000);

  it('names an unreachable or missing PostgreSQL database in one line, without a stack trace', async () => {
    const results = await Promise.all(
      ['postgres://svc:hunter2@127.0.0.1:1/svc', ...(TEST_PG_URL ? [TEST_PG_URL] : [])].map((url, i) => {
        const target = new URL(url);
        if (i === 1) target.pathname = '/svc_no_such_database';
        return outcomeOf(['keys', 'list'], { env: env({ SVC_DATABASE_URL: target.toString() }) }).then(
          (r) => ({ ...r, target }),
        );
      }),
    );
    for (const r of results) {
      expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 1, stdout: '' });
      const user = r.target.username ? `${r.target.username}@` : '';
      const shown = `${r.target.protocol}//${user}${r.target.host}${r.target.pathname}`;
      expect(r.stderr).toContain(`svc: cannot connect to the database at SVC_DATABASE_URL (${shown}): `);
      expect(r.stderr).not.toContain('hunter2');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
  });

  it('fails clearly on a missing --sub and on unknown commands', async () => {
    await expect(run('node', [...SVC_FLAGS, SVC_BIN, 'token'], { env: env() })).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--sub'),
    });
    // A sub the server would refuse (lib/jwt.ts) gets no token.
    await expect(
      run('node', [...SVC_FLAGS, SVC_BIN, 'token', '--sub', 'e'.repeat(201)], { env: env() }),
    ).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('--sub must be 1-200 characters') });
    await expect(run('node', [...SVC_FLAGS, SVC_BIN, 'frobnicate'], { env: env() })).rejects.toMatchObject({
      code: 2,
    });
  });

  it("prints a command's usage for --help or -h and does nothing else", async () => {
    // A store of its own: a command that ran instead of printing its usage would create it.
    const store = join(dir, 'help', 'svc.db');
    const calls = [
      ['serve'],
      ['migrate'],
      ['token'],
      ['token', '--sub', 'alice'],
      ['login-link'],
      ['receipts'],
      ['receipts', 'verify'],
      ['receipts', 'verify', 'export.ndjson', '--after', '1'],
      ['keys'],
      ['keys', 'rotate'],
    ];
    const results = await fourAtATime(
      calls.flatMap((args) => ['--help', '-h'].map((flag) => [args, flag] as const)),
      ([args, flag]) =>
        run('node', [...SVC_FLAGS, SVC_BIN, ...args, flag], {
          env: env({ SVC_DATABASE_URL: `sqlite:${store}`, PORT: '0' }),
          timeout: 30_000,
        }).then(
          (r) => ({ args, code: 0 as number | null, stdout: r.stdout, stderr: r.stderr }),
          (e: { code: number | null; stdout: string; stderr: string }) => ({ args, ...e }),
        ),
    );
    for (const r of results) {
      const usage =
        r.args[0] === 'receipts' ? 'usage: svc receipts verify <file|url|->' : `usage: svc ${r.args[0]}`;
      expect({ args: r.args, code: r.code, stderr: r.stderr }).toEqual({ args: r.args, code: 0, stderr: '' });
      expect(r.stdout.slice(0, usage.length)).toBe(usage);
    }
    expect(existsSync(store)).toBe(false);
    // After `--` it is a file name, not a flag.
    const file = await run('node', [...SVC_FLAGS, SVC_BIN, 'receipts', 'verify', '--', '--help'], {
      env: env(),
    }).catch((e) => e);
    expect(file.code).toBe(2);
    expect(file.stderr).toContain('ENOENT');
    const top = await run('node', [...SVC_FLAGS, SVC_BIN, '-h'], { env: env() });
    expect(top.stdout).toMatch(/^Usage: svc <command>/);
  }, 200_000);
});

describe('svc receipts verify', () => {
  let tenant: Tenant;
  let url: string;
  let lines: string[];
  const file = (name: string, content: string[]) => {
    const path = join(dir, name);
    writeFileSync(path, `${content.join('\n')}\n`);
    return path;
  };
  const verify = (args: string[], extra: Record<string, string> = {}) =>
    run('node', [...SVC_FLAGS, SVC_BIN, 'receipts', 'verify', ...args], {
      env: env({ SVC_API_KEY: '', ...extra }),
    });
  /** Resolves with the exit code and output, whatever the code. */
  const outcome = (args: string[], extra: Record<string, string> = {}) =>
    verify(args, extra).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({
        code: e.code,
        stdout: e.stdout,
        stderr: e.stderr,
      }),
    );

  // Checkpoints only on demand: one after every receipt, at tree sizes 1 to 13.
  const t = useTestApp({ checkpointIntervalMs: 0 }, { listen: true });
  const checkpoint = () =>
    t.inject({ method: 'POST', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) });
  beforeAll(async () => {
    tenant = await createTenant(t);
    for (let i = 0; i < 12; i++) {
      await t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(tenant.apiKey),
        payload: { tool_name: `tool-${i % 3}`, arguments: { i } },
      });
      expect((await checkpoint()).statusCode).toBe(201);
    }
    await t.inject({
      method: 'POST',
      url: '/v1/decisions',
      headers: keyHeader(tenant.apiKey),
      payload: {
        tool_name: 'local',
        arguments: {},
        decision: 'allow',
        mode: 'deterministic',
        latency_ms: 1,
        source: 'client',
      },
    });
    const res = await t.inject({
      method: 'GET',
      url: '/v1/receipts/export',
      headers: keyHeader(tenant.apiKey),
    });
    lines = res.body.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(13);
    expect((await checkpoint()).statusCode).toBe(201);
    url = `${t.url}/v1/receipts/export`;
  });

  it('accepts an intact export file', async () => {
    const r = await outcome([file('good.ndjson', lines)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^OK: 13 receipts verified, chain head sha256:[0-9a-f]{64}, merkle root sha256:/,
    );
  });

  it('says exactly where a tampered export breaks', async () => {
    const edited = [...lines];
    const victim = JSON.parse(edited[4]!);
    edited[4] = JSON.stringify({ ...victim, reason: 'nothing to see here' });
    const r = await outcome([file('tampered.ndjson', edited)]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      `FAILED: 2 problem(s) in 13 receipts; first break at line 5 (sequence 4, receipt ${victim.receipt_id}): ` +
        'receipt_hash does not match the receipt content',
    );

    const dropped = lines.filter((_, i) => i !== 7);
    const gap = await outcome([file('dropped.ndjson', dropped)]);
    expect(gap.code).toBe(1);
    expect(gap.stdout).toMatch(/first break at line 8 \(sequence 8, .*sequence 8 where 7 was expected/);
  });

  it('fetches and verifies the export endpoint, with --api-key or SVC_API_KEY', async () => {
    const [viaFlag, viaEnv, after] = await Promise.all([
      outcome([url, '--api-key', tenant.apiKey]),
      outcome([url], { SVC_API_KEY: tenant.apiKey }),
      outcome([url, '--after', '9', '--api-key', tenant.apiKey]),
    ]);
    expect(viaFlag.code).toBe(0);
    expect(viaFlag.stdout).toMatch(/^OK: 13 receipts verified/);
    expect(viaEnv.stdout).toBe(viaFlag.stdout);
    expect(after.code).toBe(0);
    expect(after.stdout).toMatch(/^OK: 3 receipts verified/);
    expect(after.stdout).toContain('chain starts at sequence 10');
  });

  it('exits 2 for usage and I/O errors', async () => {
    const cases = [
      [url],
      [],
      ['a', 'b'],
      [join(dir, 'missing.ndjson')],
      [url, '--after', 'x'],
      ['f', '--after', '1'],
    ];
    const starts: (() => Promise<{ code: number; stderr: string }>)[] = [
      ...cases.map((args) => () => outcome(args)),
      () => run('node', [...SVC_FLAGS, SVC_BIN, 'receipts', 'frob'], { env: env() }).catch((e) => e),
      () =>
        run('node', [...SVC_FLAGS, SVC_BIN, 'receipts', 'verify', '--bogus', 'x'], { env: env() }).catch(
          (e) => e,
        ),
    ];
    // Eight processes started at once on a busy machine could miss the test's timeout together.
    const results = await fourAtATime(starts, (start) => start());
    expect(results.map((r) => r.code)).toEqual(results.map(() => 2));
    expect(results[0]!.stderr).toContain('HTTP 401');
    expect(results[3]!.stderr).toContain('ENOENT');
  });

  it('refuses an option given twice, naming it, with the usage', async () => {
    const r = await outcome([url, '--api-key', tenant.apiKey, '--api-key', 'other']);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 2, stdout: '' });
    expect(r.stderr).toBe(
      'svc: --api-key is given more than once; it takes one value\nusage: svc receipts verify <file|url|-> [--api-key KEY] [--after N] [--checkpoints <file|url> --keys <file|url>]\n',
    );
    const after = await outcome([url, '--after', '1', '--after=2']);
    expect(after.code).toBe(2);
    expect(after.stderr).toContain('svc: --after is given more than once; it takes one value\n');
  });

  it('says why a URL could not be fetched, not only that it failed', async () => {
    // A port nothing listens on (one just freed), and one fetch refuses to connect to.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const refused = `http://127.0.0.1:${port}/v1/receipts/export`;
    const [exported, checkpoints, keys, blocked] = await Promise.all([
      outcome([refused, '--api-key', 'K']),
      outcome([file('any.ndjson', lines), '--checkpoints', refused, '--keys', refused]),
      outcome([file('any.ndjson', lines), '--checkpoints', file('none.json', ['[]']), '--keys', refused]),
      outcome(['http://127.0.0.1:1/x', '--api-key', 'K']),
    ]);
    for (const r of [exported, checkpoints, keys]) {
      expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 2, stdout: '' });
      expect(r.stderr).toBe(`svc: ${refused} could not be fetched: connect ECONNREFUSED 127.0.0.1:${port}\n`);
    }
    expect(blocked.code).toBe(2);
    expect(blocked.stderr).toBe('svc: http://127.0.0.1:1/x could not be fetched: bad port\n');
  });

  describe('against signed checkpoints', () => {
    /** Paths requested of `other`, with the API key each carried (null: none). */
    const seen: { path: string; key: string | null }[] = [];
    let other: Server;
    let otherUrl: string;
    beforeAll(async () => {
      const keySet = (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).body;
      const all = (
        await t.inject({
          method: 'GET',
          url: '/v1/receipts/checkpoints?limit=100',
          headers: keyHeader(tenant.apiKey),
        })
      ).body;
      // Another origin: a key set kept apart from the service, and a service whose export stops
      // short of its own signed checkpoints while announcing that shorter length.
      other = createServer((req, res) => {
        const key = req.headers['x-service-api-key'];
        seen.push({ path: req.url!, key: typeof key === 'string' ? key : null });
        if (req.url === '/keys.json') res.setHeader('content-type', 'application/json').end(keySet);
        else if (req.url === '/moved') res.writeHead(307, { location: '/v1/receipts/export' }).end();
        else if (req.url!.startsWith('/v1/receipts/checkpoints'))
          res.setHeader('content-type', 'application/json').end(all);
        else if (req.url === '/v1/receipts/export')
          res
            .setHeader('content-type', 'application/x-ndjson')
            .setHeader('x-chain-length', '11')
            .end(`${lines.slice(0, 11).join('\n')}\n`);
        else res.writeHead(404).end();
      });
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
      otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((resolve) => other.close(() => resolve())));

    it('checks every checkpoint of the list, page by page, and sends the API key to the service only', async () => {
      const r = await outcome([
        url,
        '--api-key',
        tenant.apiKey,
        '--checkpoints',
        `${t.url}/v1/receipts/checkpoints?limit=5`,
        '--keys',
        `${otherUrl}/keys.json`,
      ]);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('OK: 13 checkpoint(s) verified');
      expect(seen.filter((s) => s.path === '/keys.json')).toEqual([{ path: '/keys.json', key: null }]);
    });

    it('does not follow a redirect with the API key: it names the redirect and stops', async () => {
      const before = seen.length;
      const r = await outcome([`${otherUrl}/moved`, '--api-key', tenant.apiKey]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('HTTP 307, a redirect to /v1/receipts/export');
      expect(seen.slice(before).map((s) => s.path)).toEqual(['/moved']);
    });

    it('reports an export shorter than a checkpoint signed before it as broken', async () => {
      const r = await outcome([
        `${otherUrl}/v1/receipts/export`,
        '--checkpoints',
        `${otherUrl}/v1/receipts/checkpoints`,
        '--keys',
        `${otherUrl}/keys.json`,
      ]);
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(
        /^FAILED: the export ended after 11 receipt\(s\) but a signed checkpoint covers 13: receipts are missing at the end/,
      );
      // A saved export may be older than the checkpoints it is checked with: no failure then.
      const saved = await outcome([
        file('first-11.ndjson', lines.slice(0, 11)),
        '--checkpoints',
        `${otherUrl}/v1/receipts/checkpoints`,
        '--keys',
        `${otherUrl}/keys.json`,
      ]);
      expect(saved.code).toBe(0);
      expect(saved.stdout).toContain('checkpoint 13 (');
      expect(saved.stdout).toContain('unchecked: the export does not cover this tree size');
    });
  });

  it('reports receipts missing from the end of the chain as broken', async () => {
    // The stored tail is removed while the chain head still counts it.
    await t.store.db
      .deleteFrom('receipts')
      .where('organization_id', '=', tenant.orgId)
      .where('sequence', '>=', 11)
      .execute();
    const r = await outcome([url, '--api-key', tenant.apiKey]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('ended after 11 receipt(s) but the server announced 13');
  });
});
