import { generateKeyPairSync, verify } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readOperatorKey, SigningKeySet, thumbprint } from './keyset.js';
import { SigningKeyMissingError } from './model.js';
import { fileKeySetStorage, memoryKeySetStorage } from './storage.js';

const DAY = 86_400_000;
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'svc-keys-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function movableClock(start = Date.parse('2026-01-01T00:00:00Z')) {
  let t = start;
  return { now: () => new Date(t), advance: (ms: number) => (t += ms) };
}

const data = new TextEncoder().encode('tree head');

describe('signing key set', () => {
  it('generates one Ed25519 key on first open, kid = RFC 7638 thumbprint, and signs with it', async () => {
    const set = new SigningKeySet({
      storage: memoryKeySetStorage(),
      clock: movableClock(),
      overlapSeconds: 3600,
    });
    await set.open();
    const [key, ...rest] = await set.published();
    expect(rest).toHaveLength(0);
    expect(key).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    expect(key!.kid).toBe(await thumbprint(key!.x));
    const sig = await set.sign(data);
    expect(sig.kid).toBe(key!.kid);
    expect(await set.verify(data, sig)).toBe(true);
    expect(await set.verify(new TextEncoder().encode('other'), sig)).toBe(false);
  });

  it('keeps the key across restarts in a 0600 file beside the store', async () => {
    const file = join(tempDir(), 'signing-keys.json');
    const clock = movableClock();
    const a = new SigningKeySet({ storage: fileKeySetStorage(file), clock, overlapSeconds: 3600 });
    await a.open();
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const b = new SigningKeySet({ storage: fileKeySetStorage(file), clock, overlapSeconds: 3600 });
    await b.open();
    expect(await b.activeKid()).toBe(await a.activeKid());
    // What a signed, b verifies: one key set, whichever process reads it.
    expect(await b.verify(data, await a.sign(data))).toBe(true);
  });

  it('rotates: the new key signs, the old one stays published for the overlap, then is withdrawn', async () => {
    const clock = movableClock();
    const set = new SigningKeySet({ storage: memoryKeySetStorage(), clock, overlapSeconds: 7 * 86400 });
    await set.open();
    const before = await set.sign(data);
    const r = await set.rotate();
    expect(r.previousKid).toBe(before.kid);
    expect(r.kid).not.toBe(before.kid);
    expect(r.previousPublishedUntil).toBe(new Date(clock.now().getTime() + 7 * DAY).toISOString());
    expect((await set.sign(data)).kid).toBe(r.kid);
    expect((await set.published()).map((k) => k.kid)).toEqual([r.kid, before.kid]);
    expect(await set.verify(data, before)).toBe(true);
    clock.advance(7 * DAY + 1000);
    expect((await set.published()).map((k) => k.kid)).toEqual([r.kid]);
    // A retired key past its overlap no longer verifies anything.
    expect(await set.verify(data, before)).toBe(false);
    expect((await set.list()).find((k) => k.kid === before.kid)).toMatchObject({
      status: 'retired',
      published: false,
    });
  });

  it('rotates a store without a key, when not opened first, to exactly one key that signs', async () => {
    const file = join(tempDir(), 'signing-keys.json');
    const set = new SigningKeySet({
      storage: fileKeySetStorage(file),
      clock: movableClock(),
      overlapSeconds: 3600,
    });
    const r = await set.rotate();
    expect(r).toEqual({ kid: expect.any(String), previousKid: null, previousPublishedUntil: null });
    expect(await set.list()).toEqual([expect.objectContaining({ kid: r.kid, status: 'active' })]);
    expect((await set.published()).map((k) => k.kid)).toEqual([r.kid]);
    expect((await set.sign(data)).kid).toBe(r.kid);
  });

  it('another process verifies and publishes a key rotated in by one process at once or within a second', async () => {
    const storage = memoryKeySetStorage();
    const clock = movableClock();
    const a = new SigningKeySet({ storage, clock, overlapSeconds: 3600 });
    const b = new SigningKeySet({ storage, clock, overlapSeconds: 3600 });
    await a.open();
    await b.open();
    const { kid } = await a.rotate();
    const sig = await a.sign(data);
    expect(sig.kid).toBe(kid);
    // b read the set just now: a signature by the key it lacks makes it read the set again, and a
    // second one asking meanwhile waits for that read.
    expect(await Promise.all([b.verify(data, sig), b.verify(data, sig)])).toEqual([true, true]);
    const c = new SigningKeySet({ storage, clock, overlapSeconds: 3600 });
    await c.open();
    await a.rotate();
    const newer = await a.activeKid();
    expect((await c.published(newer!)).map((k) => k.kid)).toContain(newer);
    // Without a kid, what is published is at most a second old.
    const d = new SigningKeySet({ storage, clock, overlapSeconds: 3600 });
    await d.open();
    await a.rotate();
    const newest = await a.activeKid();
    await new Promise((r) => setTimeout(r, 1_050));
    expect((await d.published()).map((k) => k.kid)[0]).toBe(newest);
  });

  it('two processes rotating at once: both answer, one key signs, nothing is lost', async () => {
    const file = join(tempDir(), 'signing-keys.json');
    const clock = movableClock();
    const a = new SigningKeySet({ storage: fileKeySetStorage(file), clock, overlapSeconds: 3600 });
    const b = new SigningKeySet({ storage: fileKeySetStorage(file), clock, overlapSeconds: 3600 });
    await a.open();
    await b.open();
    await Promise.all([a.rotate(), b.rotate()]);
    const list = await a.list();
    expect(list.filter((k) => k.status === 'active')).toHaveLength(1);
    expect(list).toHaveLength(3);
  });

  describe('operator key file (SVC_SIGNING_KEY_FILE)', () => {
    const writeKey = (mode: number, format: 'jwk' | 'pem' = 'jwk') => {
      const { privateKey } = generateKeyPairSync('ed25519');
      const file = join(tempDir(), `key.${format}`);
      const text =
        format === 'jwk'
          ? JSON.stringify(privateKey.export({ format: 'jwk' }))
          : (privateKey.export({ format: 'pem', type: 'pkcs8' }) as string);
      writeFileSync(file, text, { mode });
      return { file, privateKey };
    };

    it.each(['jwk', 'pem'] as const)('signs with the operator key given as %s', async (format) => {
      const { file, privateKey } = writeKey(0o600, format);
      const set = new SigningKeySet({
        storage: memoryKeySetStorage(),
        clock: movableClock(),
        overlapSeconds: 3600,
        operatorKeyFile: file,
      });
      await set.open();
      const sig = await set.sign(data);
      expect(verify(null, data, privateKey, Buffer.from(sig.signature, 'base64url'))).toBe(true);
      expect(await set.rotate().catch((e: Error) => e.message)).toMatch(/replace that file/);
    });

    it('refuses a file that group or others can read', async () => {
      const { file } = writeKey(0o644);
      await expect(readOperatorKey(file)).rejects.toThrow(/readable by group or others/);
      const set = new SigningKeySet({
        storage: memoryKeySetStorage(),
        clock: movableClock(),
        overlapSeconds: 3600,
        operatorKeyFile: file,
      });
      await expect(set.open()).rejects.toThrow(/chmod 600/);
    });

    it('refuses a file that holds no Ed25519 key', async () => {
      const file = join(tempDir(), 'ec.pem');
      const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });
      await expect(readOperatorKey(file)).rejects.toThrow(/Ed25519 key is required/);
    });

    it('a missing file leaves signing unavailable, and a replaced file retires the old key', async () => {
      const missing = join(tempDir(), 'absent.jwk');
      const set = new SigningKeySet({
        storage: memoryKeySetStorage(),
        clock: movableClock(),
        overlapSeconds: 3600,
        operatorKeyFile: missing,
      });
      await set.open();
      await expect(set.sign(data)).rejects.toBeInstanceOf(SigningKeyMissingError);
      await expect(set.published()).rejects.toBeInstanceOf(SigningKeyMissingError);

      const storage = memoryKeySetStorage();
      const first = writeKey(0o600);
      const clock = movableClock();
      const one = new SigningKeySet({ storage, clock, overlapSeconds: 3600, operatorKeyFile: first.file });
      await one.open();
      const oldKid = await one.activeKid();
      const second = writeKey(0o600);
      const two = new SigningKeySet({ storage, clock, overlapSeconds: 3600, operatorKeyFile: second.file });
      await two.open();
      const published = (await two.published()).map((k) => k.kid);
      expect(published[0]).toBe(await two.activeKid());
      expect(published).toContain(oldKid);
    });
  });
});
