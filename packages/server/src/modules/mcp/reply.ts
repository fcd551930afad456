import type { SseWriter } from '../../events/sse.js';
import type { RpcResponse } from './jsonrpc.js';

export type ReplyOutcome = { kind: 'json'; response: RpcResponse } | { kind: 'stream' };

/**
 * The answer to one client POST. It is plain JSON unless the upstream sends messages for the
 * request (progress, sampling…) before its response: then, if the client accepts SSE, the reply
 * becomes an SSE stream carrying those messages and finally the response. A call without such
 * messages pays nothing for the possibility.
 */
export class PendingReply {
  readonly outcome: Promise<ReplyOutcome>;
  private settle!: (o: ReplyOutcome) => void;
  private writer: SseWriter | null = null;
  /** Frames waiting for the route to attach the writer. */
  private queue: string[] = [];
  private streaming = false;
  private finished = false;

  constructor(readonly canStream: boolean) {
    this.outcome = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  /** Sends one message on this reply's stream; false when it cannot (JSON-only client, answered, gone). */
  push(message: unknown): boolean {
    if (this.finished || !this.canStream) return false;
    const data = JSON.stringify(message);
    if (this.writer) return this.writer.event(data);
    if (!this.streaming) {
      this.streaming = true;
      this.settle({ kind: 'stream' });
    }
    this.queue.push(data);
    return true;
  }

  /** The response: the JSON answer, or the last event of the stream. Later calls are ignored. */
  finish(response: RpcResponse): void {
    if (this.finished) return;
    this.finished = true;
    if (!this.streaming) {
      this.settle({ kind: 'json', response });
      return;
    }
    if (!this.writer) {
      this.queue.push(JSON.stringify(response));
      return;
    }
    this.writer.event(JSON.stringify(response));
    this.writer.close();
  }

  /** The route opened the stream: what was queued goes out, and a finished reply ends it. */
  attach(writer: SseWriter): void {
    this.writer = writer;
    for (const data of this.queue.splice(0)) writer.event(data);
    if (this.finished) writer.close();
  }
}
