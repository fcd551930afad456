import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../config.js';
import type { Store } from '../storage/db.js';
import { resolveJwtSecret } from './jwt.js';

/** The generated secret kept beside the embedded store. */
describe('the generated JWT secret beside the embedded store', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const setup = () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-jwt-secret-'));
    dirs.push(dir);
    const config = { ...loadConfig({}), jwtSecret: null, jwtJwksUrl: null };
    const store = { sqlitePath: join(dir, 'svc.db'), dialect: 'sqlite' } as unknown as Store;
    return { dir, config, store };
  };

  it('is generated once, kept whole and readable by its owner only, and leaves nothing else behind', async () => {
    const { dir, config, store } = setup();
    const secret = await resolveJwtSecret(config, store);
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(readFileSync(join(dir, 'jwt-secret'), 'utf8')).toBe(`${secret}\n`);
    expect(statSync(join(dir, 'jwt-secret')).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['jwt-secret']);
    expect(await resolveJwtSecret(config, store)).toBe(secret);
  });

  it('refuses an empty file rather than sign with an empty secret', async () => {
    const { dir, config, store } = setup();
    writeFileSync(join(dir, 'jwt-secret'), '\n');
    await expect(resolveJwtSecret(config, store)).rejects.toThrow(/jwt-secret is empty/);
  });
});
