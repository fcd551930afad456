import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../config.js';
import type { Store } from '../storage/db.js';
import { resolveJwtSecret, type SecretFileLinker } from './jwt.js';

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

  /** A file system that refuses hard links with `code`; `before` runs just before it refuses. */
  const noHardLinks = (code: string, before?: () => void): SecretFileLinker & { calls: number } => {
    const files = {
      calls: 0,
      link(existingPath: string, newPath: string) {
        files.calls++;
        before?.();
        throw Object.assign(new Error(`${code}: cannot link '${existingPath}' -> '${newPath}'`), { code });
      },
    };
    return files;
  };

  it.each(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS'])(
    'is written whole in place where hard links fail with %s, reused at the next start, and no temporary file remains',
    async (code) => {
      const { dir, config, store } = setup();
      const files = noHardLinks(code);
      const secret = await resolveJwtSecret(config, store, files);
      expect(files.calls).toBe(1);
      expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(readFileSync(join(dir, 'jwt-secret'), 'utf8')).toBe(`${secret}\n`);
      expect(statSync(join(dir, 'jwt-secret')).mode & 0o777).toBe(0o600);
      expect(readdirSync(dir)).toEqual(['jwt-secret']);
      // The next start reads it back: no new secret, no link attempted, still nothing else beside it.
      expect(await resolveJwtSecret(config, store, files)).toBe(secret);
      expect(files.calls).toBe(1);
      expect(readdirSync(dir)).toEqual(['jwt-secret']);
    },
  );

  it('uses the secret another process put in place while hard links failed, leaving no temporary file', async () => {
    const { dir, config, store } = setup();
    const theirs = 'x'.repeat(43);
    const files = noHardLinks('EPERM', () => writeFileSync(join(dir, 'jwt-secret'), `${theirs}\n`));
    expect(await resolveJwtSecret(config, store, files)).toBe(theirs);
    expect(readFileSync(join(dir, 'jwt-secret'), 'utf8')).toBe(`${theirs}\n`);
    expect(readdirSync(dir)).toEqual(['jwt-secret']);
  });

  it('reports any other link failure, writing no secret and leaving no temporary file', async () => {
    const { dir, config, store } = setup();
    await expect(resolveJwtSecret(config, store, noHardLinks('EIO'))).rejects.toMatchObject({ code: 'EIO' });
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses an empty file rather than sign with an empty secret', async () => {
    const { dir, config, store } = setup();
    writeFileSync(join(dir, 'jwt-secret'), '\n');
    await expect(resolveJwtSecret(config, store)).rejects.toThrow(/jwt-secret is empty/);
  });
});
