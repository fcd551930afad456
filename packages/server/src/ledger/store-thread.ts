import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from 'node:worker_threads';
import type { BatchStore, OrgBatch, Receipt, ThreadData, ThreadReply, ThreadRequest } from './model.js';
import { decodeReceipts, encodeBatches, type WireReceipt } from './wire.js';

interface InFlight {
  resolve: (r: WireReceipt[]) => void;
  reject: (e: unknown) => void;
  /** The thread it was sent to: only that thread's end fails it. */
  worker: Worker;
}

/**
 * Run from TypeScript sources (tsx, vitest), the thread loads its module through tsx's loader as
 * well; run from built JavaScript it loads the .js file directly.
 */
function spawn(path: string, replies: MessagePort, answered: SharedArrayBuffer): Worker {
  const here = import.meta.url;
  const workerData: ThreadData = { path, replies, answered };
  const transferList = [replies];
  if (!here.endsWith('.ts')) return new Worker(new URL('./thread.js', here), { workerData, transferList });
  const require = createRequire(here);
  const pkgPath = require.resolve('tsx/package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as {
    exports: Record<string, { import: { default: string } }>;
  };
  const api = pathToFileURL(join(dirname(pkgPath), pkg.exports['./esm/api']!.import.default)).href;
  const entry = new URL('./thread.ts', here).href;
  const code = `import(${JSON.stringify(api)}).then((m) => { m.register(); return import(${JSON.stringify(entry)}); })`;
  return new Worker(code, { eval: true, workerData, transferList });
}

/**
 * Batch commits on the embedded store in a worker thread with its own connection: receipts,
 * inserts and the fsync of COMMIT run off the event loop. Started on first use; if it dies, the
 * batches in flight fail (their callers answer 503) and the next batch starts a new one.
 */
export class ThreadBatchStore implements BatchStore {
  private worker: Worker | null = null;
  private readonly inFlight = new Map<number, InFlight>();
  private nextId = 1;
  /** The thread's answers: the event loop delivers them, and poll() can take them sooner. */
  private replies: MessagePort | null = null;
  /** Set to 1 by the thread after each answer it posts, back to 0 by poll() before it reads them. */
  private answered: Int32Array | null = null;

  constructor(private readonly path: string) {}

  /**
   * Takes the answers the thread has posted, without waiting for the event loop to deliver them
   * (it does only once it is done with what it is doing, under load often a millisecond later),
   * and returns how many it took. The check is one atomic read when no answer came since the last
   * one (the flag stays up after the event loop delivered an answer: one empty read clears it).
   */
  poll(): number {
    const answered = this.answered;
    const replies = this.replies;
    if (!answered || !replies || Atomics.load(answered, 0) === 0) return 0;
    // Cleared before reading: an answer posted after this read raises the flag again.
    Atomics.store(answered, 0, 0);
    return this.settleQueued(replies);
  }

  /** Settles every answer waiting on `port`, without the event loop; returns how many. */
  private settleQueued(port: MessagePort): number {
    let taken = 0;
    for (let m = receiveMessageOnPort(port); m; m = receiveMessageOnPort(port)) {
      this.settle(m.message as ThreadReply);
      taken++;
    }
    return taken;
  }

  private settle(reply: ThreadReply): void {
    const waiting = this.inFlight.get(reply.id);
    if (!waiting) return;
    this.inFlight.delete(reply.id);
    if (reply.error) {
      const err: Error & { code?: string } = new Error(reply.error.message);
      err.name = reply.error.name;
      if (reply.error.code !== undefined) err.code = reply.error.code;
      waiting.reject(err);
    } else {
      waiting.resolve(reply.receipts);
    }
  }

  private start(): Worker {
    const { port1, port2 } = new MessageChannel();
    const flag = new SharedArrayBuffer(4);
    const worker = spawn(this.path, port2, flag);
    // The previous thread's port, if any, was closed when that thread ended (fail, below).
    this.replies = port1;
    this.answered = new Int32Array(flag);
    port1.on('message', (reply: ThreadReply) => this.settle(reply));
    // The worker keeps the process alive while a request is in flight; the port never does.
    port1.unref();
    const fail = (err: unknown) => {
      if (this.worker === worker) this.worker = null;
      // Answers the thread posted before it ended are settled first: their commits are durable.
      this.settleQueued(port1);
      // Only what this thread had: 'exit' follows 'error', and a new thread may have started between.
      for (const [id, w] of this.inFlight) {
        if (w.worker !== worker) continue;
        this.inFlight.delete(id);
        w.reject(err);
      }
      if (this.replies === port1) {
        port1.close();
        this.replies = null;
        this.answered = null;
      }
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`decision writer thread exited with code ${code}`)));
    return worker;
  }

  warm(): void {
    if (this.worker) return;
    this.worker = this.start();
    // Idle until its first batch: it must not keep the process alive.
    this.worker.unref();
  }

  async commit(batches: readonly OrgBatch[]): Promise<Map<string, Receipt>> {
    // The thread gets the batch as arrays and answers the four values the chain gave each receipt;
    // the rest of each receipt is rebuilt from the same arrays it hashed.
    const wire = encodeBatches(batches);
    return decodeReceipts(wire, await this.send((id) => ({ id, batches: wire })));
  }

  /** The thread runs a PASSIVE checkpoint of the WAL on its connection. */
  async checkpoint(): Promise<void> {
    await this.send((id) => ({ id, checkpoint: true }));
  }

  private send(request: (id: number) => ThreadRequest): Promise<WireReceipt[]> {
    this.worker ??= this.start();
    const id = this.nextId++;
    const worker = this.worker;
    // Keeps the process alive only while a request is in flight.
    if (this.inFlight.size === 0) worker.ref();
    return new Promise<WireReceipt[]>((resolve, reject) => {
      this.inFlight.set(id, { resolve, reject, worker });
      try {
        worker.postMessage(request(id));
      } catch (err) {
        // Nothing was sent (a value that cannot be cloned): nothing will answer it.
        this.inFlight.delete(id);
        reject(err);
      }
    }).finally(() => {
      if (this.inFlight.size === 0 && this.worker === worker) worker.unref();
    });
  }

  /** Closes the thread's connection; call once nothing is in flight. */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    if (!worker) return;
    const exited = new Promise<void>((r) => worker.once('exit', () => r()));
    worker.postMessage('close');
    // Its 'exit' closes its port too (fail, in start).
    await exited;
  }
}
