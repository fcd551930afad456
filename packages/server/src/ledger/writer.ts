import type { FastifyBaseLogger } from 'fastify';
import { uuidv7 } from '../lib/ids.js';
import type { Metrics } from '../metrics/model.js';
import { isStoreUnavailable, type Store } from '../storage/db.js';
import { isSqliteBusy } from '../storage/errors.js';
import type { BatchStore, OrgBatch, Receipt, WriteItem } from './model.js';
import { PostgresBatchStore } from './store-postgres.js';
import { NoWaitSqliteBatchStore, SqliteBatchStore } from './store-sqlite.js';
import { ThreadBatchStore } from './store-thread.js';

/** The weight of the newest commit in the moving average of event-loop commit times. */
const INLINE_WEIGHT = 0.2;
/**
 * A commit on the event loop counts in that average for at most this many times `inlineMaxMs`: one
 * outlier (the WAL growing on a fresh database, a stall of the host) weighs like one slow commit, not
 * like tens of them. With the defaults, three commits of 10 ms or more in a row pause the path (four
 * right after the writer starts, when the average is 0), and one alone does not.
 */
const INLINE_CLIP = 2;

interface Pending {
  item: WriteItem;
  /** Items written together by writeAll share this: one transaction, all or nothing. */
  group: object | undefined;
  receiptId: string;
  resolve: (r: Receipt) => void;
  reject: (e: unknown) => void;
}

export interface DecisionWriterOptions {
  /** Largest batch committed in one transaction. */
  maxBatch?: number;
  /**
   * Commit in a worker thread (embedded store in a file only; default false): receipts, inserts and
   * the fsync of COMMIT then run off the event loop, at the price of two thread hand-offs per batch.
   */
  thread?: boolean;
  /**
   * With the thread: a batch of one item that is the first or follows another batch of one, and
   * arrives after the writer has been idle this long (default 1 ms), is committed on the event loop
   * instead. At such low rates blocking the loop for one commit costs less than the two thread
   * hand-offs it saves; under load batches hold more items and go to the thread. Such a commit runs
   * on a connection of its own that never waits for another connection's write lock (the batch goes
   * to the thread instead) and never checkpoints the WAL (every `inlineCheckpointEvery` such
   * commits, default 100, the thread does). When the moving average of their times (each new one
   * weighs 1/5, and counts for at most twice `inlineMaxMs`) exceeds `inlineMaxMs` (default 5 ms: a
   * slow disk; 0: every commit is slow), every batch goes to the thread for the next `inlinePauseMs`
   * (default 10 s); a few slow commits among fast ones do not get there. The first commit on the
   * event loop after a pause is judged alone: fast, the path stays open; slow, it pauses again.
   */
  inlineAfterIdleMs?: number;
  inlineMaxMs?: number;
  inlinePauseMs?: number;
  inlineCheckpointEvery?: number;
  log?: FastifyBaseLogger;
  metrics?: Pick<Metrics, 'commitBatch'>;
}

/**
 * Group commit for decisions and receipts. Calls arriving while a transaction is in flight (or
 * within the same event-loop tick) are committed together in the next one, so durability costs one
 * fsync per batch instead of one per call. Each organization's chain head is moved once per batch,
 * never once per decision, under the store's write lock (SQLite) or from the head the batch's
 * receipts extend and only if it is still there (PostgreSQL: store-postgres.ts), so several
 * processes on one database extend the chain without forking it. A promise resolves only after
 * COMMIT.
 */
export class DecisionWriter {
  private queue: Pending[] = [];
  private flushing = false;
  private scheduled = false;
  private closed = false;
  private idle: Promise<void> = Promise.resolve();
  private markIdle: (() => void) | null = null;
  private readonly maxBatch: number;
  private readonly batches: BatchStore;
  /** Set with the thread: the event loop's own batch store, for a lone item after an idle spell. */
  private readonly inline: BatchStore | null = null;
  private readonly inlineAfterIdleMs: number;
  private readonly inlineMaxMs: number;
  private readonly inlinePauseMs: number;
  /** No commit on the event loop before this time (performance.now()): they have been slow. */
  private inlinePausedUntil = Number.NEGATIVE_INFINITY;
  /** Commits made on the event loop so far. */
  private inlineCommits = 0;
  /** Moving average of the commits on the event loop, in ms (each new one weighs INLINE_WEIGHT). */
  private inlineAverageMs = 0;
  private readonly inlineCheckpointEvery: number;
  /** When the last commit ended (performance.now()): the writer has been idle since. */
  private lastCommitted = Number.NEGATIVE_INFINITY;
  /** Items in the previous batch (1 before the first: an idle writer). */
  private previousSize = 1;

  constructor(
    store: Store,
    private readonly options: DecisionWriterOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 512;
    this.inlineAfterIdleMs = options.inlineAfterIdleMs ?? 1;
    this.inlineMaxMs = options.inlineMaxMs ?? 5;
    this.inlinePauseMs = options.inlinePauseMs ?? 10_000;
    this.inlineCheckpointEvery = options.inlineCheckpointEvery ?? 100;
    if (!store.sqlite) this.batches = new PostgresBatchStore(store);
    else if (store.sqlitePath && options.thread === true) {
      this.batches = new ThreadBatchStore(store.sqlitePath);
      this.inline = new NoWaitSqliteBatchStore(store.sqlitePath);
    } else this.batches = new SqliteBatchStore(store);
  }

  /** Resolves with the committed receipt once the item is durable. */
  write(item: WriteItem): Promise<Receipt> {
    if (this.closed) return Promise.reject(new Error('decision writer is closed'));
    return new Promise<Receipt>((resolve, reject) => {
      this.enqueue(item, undefined, resolve, reject);
    });
  }

  /**
   * Commits the items in one transaction, or none of them: a batch never splits them, and if their
   * transaction fails they are retried together and fail together.
   */
  writeAll(items: readonly WriteItem[]): Promise<Receipt[]> {
    if (this.closed) return Promise.reject(new Error('decision writer is closed'));
    const group = {};
    return Promise.all(
      items.map(
        (item) => new Promise<Receipt>((resolve, reject) => this.enqueue(item, group, resolve, reject)),
      ),
    );
  }

  private enqueue(
    item: WriteItem,
    group: object | undefined,
    resolve: (r: Receipt) => void,
    reject: (e: unknown) => void,
  ): void {
    // Each new decision first settles the commits the thread has finished: under load the event
    // loop would deliver their answers only after the I/O it is busy with.
    this.batches.poll?.();
    this.queue.push({ item, group, receiptId: uuidv7(), resolve, reject });
    if (this.queue.length === 1 && !this.flushing) {
      this.idle = new Promise((r) => {
        this.markIdle = r;
      });
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.flushing || this.scheduled) return;
    this.scheduled = true;
    // setImmediate lets every request parsed in this I/O turn join the batch.
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.takeBatch();
        try {
          const receipts = await this.commit(batch);
          for (const [i, p] of batch.entries()) p.resolve(receipts[i]!);
        } catch (err) {
          // A store that is not answering fails every item alike: retrying each alone would make the
          // k-th wait k more timeouts for the same answer.
          // What was queued meanwhile fails with it: the next batch would wait as long again.
          if (isStoreUnavailable(err)) {
            this.options.log?.error({ err }, 'decision batch failed to commit: the store is not answering');
            for (const p of batch.concat(this.queue.splice(0))) p.reject(err);
            continue;
          }
          // One bad item must not fail its neighbours: retry each alone (a writeAll group as a whole).
          for (const unit of units(batch)) {
            try {
              const receipts = unit.length === batch.length ? Promise.reject(err) : this.commit(unit);
              for (const [i, r] of (await receipts).entries()) unit[i]!.resolve(r);
            } catch (itemErr) {
              this.options.log?.error({ err: itemErr }, 'decision failed to commit');
              for (const p of unit) p.reject(itemErr);
            }
          }
        }
      }
    } finally {
      this.flushing = false;
      this.markIdle?.();
      this.markIdle = null;
    }
  }

  /** Up to maxBatch items, extended so that a writeAll group is never split. */
  private takeBatch(): Pending[] {
    let end = Math.min(this.maxBatch, this.queue.length);
    const last = this.queue[end - 1]?.group;
    while (last !== undefined && end < this.queue.length && this.queue[end]!.group === last) end++;
    return this.queue.splice(0, end);
  }

  private async commit(batch: Pending[]): Promise<Receipt[]> {
    const byOrg = new Map<string, OrgBatch>();
    for (const p of batch) {
      const org = p.item.receipt.organization_id;
      let group = byOrg.get(org);
      if (!group) {
        group = { organizationId: org, items: [] };
        byOrg.set(org, group);
      }
      group.items.push({ item: p.item, receiptId: p.receiptId });
    }
    // Organizations in a fixed order: heads are locked in that order (no deadlock between processes).
    const groups = [...byOrg.values()].sort((a, b) => (a.organizationId < b.organizationId ? -1 : 1));
    const started = performance.now();
    const inline = this.inlineFor(batch.length, started);
    this.previousSize = batch.length;
    try {
      let receipts: Map<string, Receipt> | null = null;
      if (inline) {
        try {
          receipts = await inline.commit(groups);
        } catch (err) {
          // Another connection holds the write lock: the thread waits for it, the event loop does not.
          if (!isSqliteBusy(err)) throw err;
        }
        if (receipts) {
          // The first one opens its connection and prepares its statements: its time says nothing
          // about the disk.
          if (this.inlineCommits > 0) {
            // inlineMaxMs 0 makes every commit slow: no cap then.
            const cap = this.inlineMaxMs > 0 ? this.inlineMaxMs * INLINE_CLIP : Number.POSITIVE_INFINITY;
            const took = Math.min(performance.now() - started, cap);
            // An average above the limit started a pause, which this commit follows: it judges the
            // disk alone. Blended into that average, a fast one would not reopen the path, and the
            // path would stay shut for one pause per commit it takes to bring the average down.
            if (this.inlineAverageMs > this.inlineMaxMs) this.inlineAverageMs = took;
            else this.inlineAverageMs += (took - this.inlineAverageMs) * INLINE_WEIGHT;
            if (this.inlineAverageMs > this.inlineMaxMs)
              this.inlinePausedUntil = performance.now() + this.inlinePauseMs;
          }
          // That connection leaves the WAL to grow: the thread moves it into the database file,
          // off the event loop, without waiting for anyone (PASSIVE).
          if (++this.inlineCommits % this.inlineCheckpointEvery === 0) {
            this.batches
              .checkpoint?.()
              .catch((err) => this.options.log?.warn({ err }, 'WAL checkpoint failed'));
          }
        }
        // Started now, so the first burst does not wait for the thread to start.
        this.batches.warm?.();
      }
      const on = receipts || !this.inline ? 'event_loop' : 'thread';
      receipts ??= await this.batches.commit(groups);
      this.options.metrics?.commitBatch(batch.length, (performance.now() - started) / 1000, on);
      return batch.map((p) => receipts.get(p.receiptId)!);
    } finally {
      this.lastCommitted = performance.now();
    }
  }

  /**
   * The event loop's store for a batch starting now, or null for the usual one. A lone item after
   * an idle spell, and after another lone item: the service is not under load (a burst ends in an
   * idle spell too, while its answers are written), so the event loop has nothing else to do
   * meanwhile. A batch that waited for the previous commit finds no idle spell.
   */
  private inlineFor(size: number, now: number): BatchStore | null {
    const lone = size === 1 && this.previousSize === 1;
    const idle = now - this.lastCommitted >= this.inlineAfterIdleMs;
    return lone && idle && now >= this.inlinePausedUntil ? this.inline : null;
  }

  /** Waits until everything accepted so far is committed (or failed). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.flushing || this.scheduled) await this.idle;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.drain();
    await this.batches.close?.();
    await this.inline?.close?.();
  }
}

/** Splits a batch into retry units: one item alone, or a whole writeAll group. */
function units(batch: Pending[]): Pending[][] {
  const out: Pending[][] = [];
  for (const p of batch) {
    const prev = out[out.length - 1];
    if (p.group !== undefined && prev?.[0]?.group === p.group) prev.push(p);
    else out.push([p]);
  }
  return out;
}
