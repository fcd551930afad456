import type { SseWriter } from '../../events/sse.js';
import type { RpcResponse } from './jsonrpc.js';
import type { ReplayLog, StreamKey } from './replay.js';

export type ReplyOutcome = { kind: 'json'; response: RpcResponse } | { kind: 'stream' };

/** Where a streamed reply is recorded for resumption: its session's log, and the session's index of live replies. */
export interface ReplyHost {
  log: ReplayLog;
  track(key: StreamKey, reply: PendingReply): void;
  untrack(key: StreamKey): void;
}

/**
 * The answer to one client POST. It is plain JSON unless the upstream sends messages for the
 * request (progress, sampling…) before its response: then, if the client accepts SSE, the reply
 * becomes an SSE stream carrying those messages and finally the response. A call without such
 * messages pays nothing for the possibility.
 *
 * A streamed reply records each event in its session's replay log before writing it, so a client
 * whose connection broke resumes it with GET + Last-Event-ID: the events it missed are replayed and
 * the rest, up to the response, go to the new connection. Messages keep going to this stream while
 * its connection is down, as MCP prescribes (they are not re-routed to another stream).
 */
export class PendingReply {
  readonly outcome: Promise<ReplyOutcome>;
  private settle!: (o: ReplyOutcome) => void;
  private writer: SseWriter | null = null;
  /** Events (already recorded, with their ids) waiting for the route to attach the writer. */
  private queue: { id: string; data: string }[] = [];
  private key: StreamKey | null = null;
  private finished = false;

  constructor(
    readonly canStream: boolean,
    private readonly host: ReplyHost | null = null,
  ) {
    this.outcome = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  /** Sends one message on this reply's stream; false when it cannot (JSON-only client, answered). */
  push(message: unknown): boolean {
    if (this.finished || !this.canStream || !this.host) return false;
    const data = JSON.stringify(message);
    if (this.key === null) {
      this.key = this.host.log.stream('p');
      this.host.track(this.key, this);
      this.settle({ kind: 'stream' });
    }
    const id = this.host.log.append(this.key, data);
    if (this.writer) this.writer.event(data, undefined, id);
    else this.queue.push({ id, data });
    return true;
  }

  /** The response: the JSON answer, or the last event of the stream. Later calls are ignored. */
  finish(response: RpcResponse): void {
    if (this.finished) return;
    this.finished = true;
    if (this.key === null || !this.host) {
      this.settle({ kind: 'json', response });
      return;
    }
    const data = JSON.stringify(response);
    const id = this.host.log.append(this.key, data);
    this.host.untrack(this.key);
    if (!this.writer) {
      this.queue.push({ id, data });
      return;
    }
    this.writer.event(data, undefined, id);
    this.writer.close();
  }

  /** The route opened the stream: what was queued goes out, and a finished reply ends it. */
  attach(writer: SseWriter): void {
    if (this.writer) {
      // Already resumed on another connection (the client had this stream's ids before its answer
      // began here): that connection carries it.
      writer.close();
      return;
    }
    this.writer = writer;
    for (const e of this.queue.splice(0)) writer.event(e.data, undefined, e.id);
    if (this.finished) writer.close();
  }

  /**
   * A resumption: the route replayed the missed events from the log on `writer`, which now
   * carries the rest of this reply (the connection it replaces is closed).
   */
  resume(writer: SseWriter): void {
    const old = this.writer;
    this.writer = writer;
    this.queue = [];
    if (old && old !== writer) old.close();
    if (this.finished) writer.close();
  }
}
