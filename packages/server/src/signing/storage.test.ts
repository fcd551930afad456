import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { SOURCE_FLAGS } from '../../test/bin.js';
import type { KeySetDocument } from './model.js';
import { fileKeySetStorage, removeStaleLock } from './storage.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'svc-keylock-'));
  dirs.push(d);
  return d;
};

const doc = (marker: string) => ({ version: 1, keys: [{ kid: marker }] }) as unknown as KeySetDocument;
const STORAGE = join(import.meta.dirname, 'storage.ts');

/**
 * One process: waits at a barrier (the `go` file), then tries to swap the stored document for its
 * own; prints whether it won.
 */
const CHILD = `
import { existsSync, writeFileSync } from 'node:fs';
import { fileKeySetStorage } from ${JSON.stringify(STORAGE)};
const [file, id, dir] = process.argv.slice(-3);
const storage = fileKeySetStorage(file);
const previous = await storage.read();
writeFileSync(dir + '/ready-' + id, '');
while (!existsSync(dir + '/go')) await new Promise((r) => setTimeout(r, 1));
const won = await storage.swap(previous, { version: 1, keys: [{ kid: 'process-' + id }] });
process.stdout.write(won ? 'won' : 'lost');
`;

function child(file: string, id: number, dir: string): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      [...SOURCE_FLAGS, '--input-type=module', '-e', CHILD, file, String(id), dir],
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
    ),
  );
}

describe('the key set file beside the embedded store', () => {
  it('lets exactly one of several processes win a swap from the same document', async () => {
    const dir = tempDir();
    const file = join(dir, 'signing-keys.json');
    expect(await fileKeySetStorage(file).swap(null, doc('initial'))).toBe(true);
    const n = 4;
    const results = Array.from({ length: n }, (_, i) => child(file, i, dir));
    // Release them together once every one has read the same document.
    for (;;) {
      if (Array.from({ length: n }, (_, i) => existsSync(join(dir, `ready-${i}`))).every(Boolean)) break;
      await sleep(5);
    }
    writeFileSync(join(dir, 'go'), '');
    const outcomes = await Promise.all(results);
    const winners = outcomes.flatMap((o, i) => (o === 'won' ? [i] : []));
    expect(winners).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'lost')).toHaveLength(n - 1);
    expect(JSON.parse(readFileSync(file, 'utf8')).keys[0].kid).toBe(`process-${winners[0]}`);
    expect(existsSync(`${file}.lock`)).toBe(false);
  }, 120_000);

  it('takes over a lock left by a process that died holding it', async () => {
    const dir = tempDir();
    const file = join(dir, 'signing-keys.json');
    // Left a minute ago: a holder keeps it for milliseconds.
    writeFileSync(`${file}.lock`, 'a-dead-writer');
    const past = new Date(Date.now() - 60_000);
    utimesSync(`${file}.lock`, past, past);
    expect(await fileKeySetStorage(file).swap(null, doc('after-crash'))).toBe(true);
    expect(existsSync(`${file}.lock`)).toBe(false);
  });

  it('removes a stale lock only as judged under its guard: never one taken afresh meanwhile', () => {
    const dir = tempDir();
    const lock = join(dir, 'signing-keys.json.lock');
    const past = new Date(Date.now() - 60_000);
    // Stale: removed, and the guard with it.
    writeFileSync(lock, 'a-dead-writer');
    utimesSync(lock, past, past);
    removeStaleLock(lock);
    expect([existsSync(lock), existsSync(`${lock}.takeover`)]).toEqual([false, false]);
    // Judged stale by a process that then waited: meanwhile another removed it and took it afresh.
    writeFileSync(lock, 'the-new-holder');
    removeStaleLock(lock);
    expect(readFileSync(lock, 'utf8')).toBe('the-new-holder');
    // Another process is taking a stale lock over (it holds the guard): left to it.
    utimesSync(lock, past, past);
    writeFileSync(`${lock}.takeover`, '');
    removeStaleLock(lock);
    expect(readFileSync(lock, 'utf8')).toBe('the-new-holder');
    // A guard left by a process that died holding it goes stale too: removed, the lock at the next turn.
    utimesSync(`${lock}.takeover`, past, past);
    removeStaleLock(lock);
    expect(existsSync(`${lock}.takeover`)).toBe(false);
    removeStaleLock(lock);
    expect(existsSync(lock)).toBe(false);
  });

  it('waits for a live lock holder and then compares against what it wrote', async () => {
    const dir = tempDir();
    const file = join(dir, 'signing-keys.json');
    const storage = fileKeySetStorage(file);
    expect(await storage.swap(null, doc('first'))).toBe(true);
    // Another writer holds the lock (fresh) and changes the file meanwhile.
    writeFileSync(`${file}.lock`, 'another-writer');
    const waiting = storage.swap(doc('first'), doc('mine'));
    await sleep(50);
    writeFileSync(file, JSON.stringify(doc('theirs')));
    rmSync(`${file}.lock`);
    expect(await waiting).toBe(false);
    expect(JSON.parse(readFileSync(file, 'utf8')).keys[0].kid).toBe('theirs');
  });
});
