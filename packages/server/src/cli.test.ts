import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SOURCE_FLAGS, SVC_BIN } from '../test/bin.js';
import { useTestApp } from '../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../test/helpers.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'svc-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function env(extra: Record<string, string> = {}) {
  const { SVC_JWT_SECRET: _a, SVC_JWT_JWKS_URL: _b, ...rest } = process.env;
  return { ...rest, SVC_DATABASE_URL: `sqlite:${join(dir, 'svc.db')}`, ...extra };
}

describe('svc command', () => {
  it('migrates, then reports nothing left to do', async () => {
    const first = await run('node', [...SOURCE_FLAGS, SVC_BIN, 'migrate'], { env: env() });
    expect(first.stdout).toMatch(/applied: 0001_tenancy/);
    const second = await run('node', [...SOURCE_FLAGS, SVC_BIN, 'migrate'], { env: env() });
    expect(second.stdout).toMatch(/already up to date/);
  });

  it('prints a token signed with the secret generated beside the embedded store', async () => {
    const { stdout } = await run(
      'node',
      [...SOURCE_FLAGS, SVC_BIN, 'token', '--sub', 'alice', '--ttl', '10m'],
      { env: env() },
    );
    const secretFile = join(dir, 'jwt-secret');
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const secret = readFileSync(secretFile, 'utf8').trim();
    expect(secret.length).toBeGreaterThanOrEqual(40);
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode(secret));
    expect(payload.sub).toBe('alice');
    expect(payload.exp! - payload.iat!).toBe(600);
  });

  it('uses SVC_JWT_SECRET when set', async () => {
    const { stdout } = await run('node', [...SOURCE_FLAGS, SVC_BIN, 'token', '--sub', 'bob'], {
      env: env({ SVC_JWT_SECRET: 'configured-secret' }),
    });
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode('configured-secret'));
    expect(payload.sub).toBe('bob');
  });

  it('fails clearly on a missing --sub and on unknown commands', async () => {
    await expect(run('node', [...SOURCE_FLAGS, SVC_BIN, 'token'], { env: env() })).rejects.toMatchObject({
      stderr: expect.stringContaining('--sub'),
    });
    // A sub the server would refuse (lib/jwt.ts) gets no token.
    await expect(
      run('node', [...SOURCE_FLAGS, SVC_BIN, 'token', '--sub', 'e'.repeat(201)], { env: env() }),
    ).rejects.toMatchObject({ stderr: expect.stringContaining('--sub must be 1-200 characters') });
    await expect(run('node', [...SOURCE_FLAGS, SVC_BIN, 'frobnicate'], { env: env() })).rejects.toMatchObject(
      { code: 2 },
    );
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
    const results = await Promise.all(
      calls.flatMap((args) =>
        ['--help', '-h'].map((flag) =>
          run('node', [...SOURCE_FLAGS, SVC_BIN, ...args, flag], {
            env: env({ SVC_DATABASE_URL: `sqlite:${store}`, PORT: '0' }),
            timeout: 20_000,
          }).then(
            (r) => ({ args, code: 0, stdout: r.stdout, stderr: r.stderr }),
            (e: { code: number; stdout: string; stderr: string }) => ({ args, ...e }),
          ),
        ),
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
    const file = await run('node', [...SOURCE_FLAGS, SVC_BIN, 'receipts', 'verify', '--', '--help'], {
      env: env(),
    }).catch((e) => e);
    expect(file.code).toBe(2);
    expect(file.stderr).toContain('ENOENT');
    const top = await run('node', [...SOURCE_FLAGS, SVC_BIN, '-h'], { env: env() });
    expect(top.stdout).toMatch(/^Usage: svc <command>/);
  });
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
    run('node', [...SOURCE_FLAGS, SVC_BIN, 'receipts', 'verify', ...args], {
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

  const t = useTestApp({}, { listen: true });
  beforeAll(async () => {
    tenant = await createTenant(t);
    for (let i = 0; i < 12; i++) {
      await t.inject({
        method: 'POST',
        url: '/v1/tools/validate',
        headers: keyHeader(tenant.apiKey),
        payload: { tool_name: `tool-${i % 3}`, arguments: { i } },
      });
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
    const results = await Promise.all([
      ...cases.map((args) => outcome(args)),
      run('node', [...SOURCE_FLAGS, SVC_BIN, 'receipts', 'frob'], { env: env() }).catch((e) => e),
      run('node', [...SOURCE_FLAGS, SVC_BIN, 'receipts', 'verify', '--bogus', 'x'], { env: env() }).catch(
        (e) => e,
      ),
    ]);
    expect(results.map((r) => r.code)).toEqual(results.map(() => 2));
    expect(results[0]!.stderr).toContain('HTTP 401');
    expect(results[3]!.stderr).toContain('ENOENT');
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
