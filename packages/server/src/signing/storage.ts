import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Store } from '../storage/db.js';
import type { KeySetDocument } from './model.js';

/**
 * Where the generated key set is kept. A write is a compare-and-swap against the document read
 * before, so two processes rotating at once cannot both win (the loser re-reads and sees the winner).
 */
export interface KeySetStorage {
  read(): Promise<KeySetDocument | null>;
  /** Writes `next` if the stored document is still `previous` (null: none yet); false when it moved. */
  swap(previous: KeySetDocument | null, next: KeySetDocument): Promise<boolean>;
}

const SETTING = 'signing_keys';

function parse(text: string | null | undefined): KeySetDocument | null {
  if (!text) return null;
  const doc = JSON.parse(text) as KeySetDocument;
  if (doc?.version !== 1 || !Array.isArray(doc.keys)) throw new Error('unreadable signing key set');
  return doc;
}

/** How long a writer waits for another process's lock before giving up. */
const LOCK_WAIT_MS = 10_000;
/**
 * A lock older than this was left by a process that died while holding it: a writer holds it for
 * the few milliseconds of one compare and write. (Age, not the holder's pid: processes sharing the
 * directory may live in different pid namespaces.)
 */
const LOCK_STALE_MS = 5_000;

/**
 * Runs `fn` holding `<file>.lock`, created with O_EXCL so that of several processes sharing the
 * directory exactly one holds it. The lock holds a random token: a holder releases only its own
 * lock. A stale lock is removed under a guard of its own (removeStaleLock), then taken afresh.
 */
async function withFileLock<T>(file: string, fn: () => T): Promise<T> {
  const lock = `${file}.lock`;
  const token = randomBytes(16).toString('hex');
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(lock, 'wx', 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (staleLock(lock)) {
        removeStaleLock(lock);
        continue;
      }
      if (Date.now() > deadline) {
        throw new Error(
          `the signing key set is locked by another process (${lock}); remove the file if none runs`,
        );
      }
      await sleep(Math.min(5 * 2 ** attempt, 100));
      continue;
    }
    try {
      writeSync(fd, token);
      closeSync(fd);
      return fn();
    } finally {
      try {
        if (readFileSync(lock, 'utf8') === token) unlinkSync(lock);
      } catch {
        // Already taken over as stale: nothing of ours to release.
      }
    }
  }
}

/**
 * Removes `lock` if it is stale, judged again while holding `<lock>.takeover` (created with O_EXCL).
 * Two processes may both have judged the lock stale; the first removes it and takes a new lock, and
 * without the guard the second would then remove that fresh one, and both would hold the lock. Under
 * the guard the second finds the lock fresh and leaves it. A guard left by a process that died while
 * holding it (a few microseconds) goes stale too, and is removed.
 */
export function removeStaleLock(lock: string): void {
  const guard = `${lock}.takeover`;
  let fd: number;
  try {
    fd = openSync(guard, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    if (staleLock(guard)) unlinkQuietly(guard);
    return;
  }
  closeSync(fd);
  try {
    if (staleLock(lock)) unlinkQuietly(lock);
  } finally {
    unlinkQuietly(guard);
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Gone already.
  }
}

function staleLock(lock: string): boolean {
  try {
    return Date.now() - statSync(lock).mtimeMs > LOCK_STALE_MS;
  } catch {
    return true; // released meanwhile: try again at once
  }
}

/**
 * Beside the embedded store: a file next to the SQLite database (mode 0600), so a copy of the
 * database alone does not carry the private key that signs its history. The compare and the write
 * happen under a lock file, so processes sharing the database cannot both win a swap.
 */
export function fileKeySetStorage(file: string): KeySetStorage {
  return {
    async read() {
      return existsSync(file) ? parse(readFileSync(file, 'utf8')) : null;
    },
    swap(previous, next) {
      return withFileLock(file, () => {
        const current = existsSync(file) ? readFileSync(file, 'utf8') : null;
        if (
          (current === null ? null : JSON.stringify(parse(current))) !==
          (previous && JSON.stringify(previous))
        )
          return false;
        const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
        writeFileSync(tmp, `${JSON.stringify(next, null, 2)}\n`, { mode: 0o600 });
        chmodSync(tmp, 0o600);
        renameSync(tmp, file);
        return true;
      });
    },
  };
}

/** On PostgreSQL: one row of the settings table, shared by every instance on the database. */
export function settingsKeySetStorage(store: Store): KeySetStorage {
  return {
    async read() {
      const row = await store.db
        .selectFrom('settings')
        .select('value')
        .where('key', '=', SETTING)
        .executeTakeFirst();
      return parse(row?.value);
    },
    async swap(previous, next) {
      const value = JSON.stringify(next);
      if (previous === null) {
        const res = await store.db
          .insertInto('settings')
          .values({ key: SETTING, value })
          .onConflict((oc) => oc.column('key').doNothing())
          .executeTakeFirst();
        return Number(res.numInsertedOrUpdatedRows ?? 0) === 1;
      }
      const res = await store.db
        .updateTable('settings')
        .set({ value })
        .where('key', '=', SETTING)
        .where('value', '=', JSON.stringify(previous))
        .executeTakeFirst();
      return Number(res.numUpdatedRows) === 1;
    },
  };
}

/** An in-memory SQLite store has nothing to keep the key beside: it lives as long as the process. */
export function memoryKeySetStorage(): KeySetStorage {
  let doc: KeySetDocument | null = null;
  return {
    async read() {
      return doc;
    },
    async swap(previous, next) {
      if (JSON.stringify(doc) !== JSON.stringify(previous)) return false;
      doc = next;
      return true;
    },
  };
}

export function keySetStorageFor(store: Store): KeySetStorage {
  if (store.sqlitePath) return fileKeySetStorage(join(dirname(store.sqlitePath), 'signing-keys.json'));
  if (store.dialect === 'postgres') return settingsKeySetStorage(store);
  return memoryKeySetStorage();
}
