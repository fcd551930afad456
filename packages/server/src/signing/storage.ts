import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
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

/**
 * Beside the embedded store: a file next to the SQLite database (mode 0600), so a copy of the
 * database alone does not carry the private key that signs its history.
 */
export function fileKeySetStorage(file: string): KeySetStorage {
  return {
    async read() {
      return existsSync(file) ? parse(readFileSync(file, 'utf8')) : null;
    },
    async swap(previous, next) {
      const current = existsSync(file) ? readFileSync(file, 'utf8') : null;
      if (
        (current === null ? null : JSON.stringify(parse(current))) !== (previous && JSON.stringify(previous))
      )
        return false;
      const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
      writeFileSync(tmp, `${JSON.stringify(next, null, 2)}\n`, { mode: 0o600 });
      chmodSync(tmp, 0o600);
      renameSync(tmp, file);
      return true;
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
