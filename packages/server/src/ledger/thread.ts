/**
 * The writer thread of the embedded store: its own SQLite connection, on which it computes receipts
 * and commits batches (fsync included), so the event loop keeps serving requests meanwhile.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openSqliteHandle } from '../storage/db.js';
import type { ThreadData, ThreadReply, ThreadRequest } from './model.js';
import { createSqliteCommit, type SqliteCommit } from './store-sqlite.js';
import { encodeReceipts } from './wire.js';

const port = parentPort;
if (!port) throw new Error('ledger/thread.ts runs as a worker thread');
const { path, replies, answered } = workerData as ThreadData;
const db = openSqliteHandle(path);
const flag = new Int32Array(answered);
let commit: SqliteCommit | null = null;

port.on('message', (msg: ThreadRequest | 'close') => {
  if (msg === 'close') {
    db.close();
    replies.close();
    port.close();
    return;
  }
  let reply: ThreadReply;
  try {
    if ('checkpoint' in msg) {
      db.pragma('wal_checkpoint(PASSIVE)');
      reply = { id: msg.id, receipts: [] };
    } else {
      commit ??= createSqliteCommit(db);
      reply = { id: msg.id, receipts: encodeReceipts(commit(msg.batches).values()) };
    }
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    // The driver's code goes along: callers tell a unique violation (a decision id already recorded)
    // from other failures by it, as with a commit on the event loop.
    const code = (e as { code?: unknown }).code;
    reply = {
      id: msg.id,
      error: { name: e.name, message: e.message, ...(typeof code === 'string' ? { code } : {}) },
    };
  }
  replies.postMessage(reply);
  // After the post: when the event loop sees the flag, the answer is there to take.
  Atomics.store(flag, 0, 1);
});
