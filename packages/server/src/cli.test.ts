import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { jwtVerify } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const BIN = join(import.meta.dirname, '..', 'bin', 'svc.js');
const dir = mkdtempSync(join(tmpdir(), 'svc-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function env(extra: Record<string, string> = {}) {
  const { SVC_JWT_SECRET: _a, SVC_JWT_JWKS_URL: _b, ...rest } = process.env;
  return { ...rest, SVC_DATABASE_URL: `sqlite:${join(dir, 'svc.db')}`, ...extra };
}

describe('svc command', () => {
  it('migrates, then reports nothing left to do', async () => {
    const first = await run('node', [BIN, 'migrate'], { env: env() });
    expect(first.stdout).toMatch(/applied: 0001_tenancy/);
    const second = await run('node', [BIN, 'migrate'], { env: env() });
    expect(second.stdout).toMatch(/already up to date/);
  });

  it('prints a token signed with the secret generated beside the embedded store', async () => {
    const { stdout } = await run('node', [BIN, 'token', '--sub', 'alice', '--ttl', '10m'], { env: env() });
    const secretFile = join(dir, 'jwt-secret');
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const secret = readFileSync(secretFile, 'utf8').trim();
    expect(secret.length).toBeGreaterThanOrEqual(40);
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode(secret));
    expect(payload.sub).toBe('alice');
    expect(payload.exp! - payload.iat!).toBe(600);
  });

  it('uses SVC_JWT_SECRET when set', async () => {
    const { stdout } = await run('node', [BIN, 'token', '--sub', 'bob'], {
      env: env({ SVC_JWT_SECRET: 'configured-secret' }),
    });
    const { payload } = await jwtVerify(stdout.trim(), new TextEncoder().encode('configured-secret'));
    expect(payload.sub).toBe('bob');
  });

  it('fails clearly on a missing --sub and on unknown commands', async () => {
    await expect(run('node', [BIN, 'token'], { env: env() })).rejects.toMatchObject({
      stderr: expect.stringContaining('--sub'),
    });
    await expect(run('node', [BIN, 'frobnicate'], { env: env() })).rejects.toMatchObject({ code: 2 });
  });
});
