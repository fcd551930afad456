import type { SseWriter } from '../../events/sse.js';

/** How much of a session's SSE traffic is kept for resumption (Last-Event-ID). */
export interface ReplayLimits {
  /** Events kept per session, newest first; older ones are dropped. */
  events: number;
  /** Bytes of event data kept per session (UTF-16 code units of the JSON, a close estimate). */
  bytes: number;
  /** Bytes kept by all the sessions of the instance together: past it, a session appending drops its own oldest events. */
  totalBytes: number;
}

export const DEFAULT_REPLAY_LIMITS: ReplayLimits = {
  events: 1000,
  bytes: 4 * 1024 * 1024,
  totalBytes: 256 * 1024 * 1024,
};

/** The bytes held by every replay log of the instance (shared by the sessions of one McpSessions). */
export interface ReplayBudget {
  used: number;
}

/** A stream's key: `g<n>` for a GET stream, `p<n>` for a POST answered as a stream. */
export type StreamKey = string;

interface Entry {
  seq: number;
  stream: StreamKey;
  type: string | undefined;
  data: string;
}

/** One recorded event, ready to be written again with its original id. */
export interface Replayed {
  id: string;
  type: string | undefined;
  data: string;
}

const EVENT_ID = /^([gp])([1-9][0-9]{0,14})-([1-9][0-9]{0,14})$/;

/**
 * The SSE events one MCP session sent, on all its streams (POST answers and GET streams), kept
 * within ReplayLimits so that a client whose stream broke can resume it with Last-Event-ID. An
 * event id is `<stream>-<seq>` (`g3-17`: the 17th event of the session, on its third stream, a GET
 * one): `seq` counts every event of the session, so ids are unique across the session's streams.
 * A Last-Event-ID is this session's only if its event was on the stream it names (the stream of the
 * newest dropped event is remembered for that). A resumption is possible only while every later
 * event of that stream is still held.
 */
export class ReplayLog {
  private seq = 0;
  private streams = 0;
  private entries: Entry[] = [];
  /** Index of the oldest entry held (dropping from the front without shifting the array each time). */
  private head = 0;
  private bytes = 0;
  /** The seq of the newest event dropped (0: none): events up to it cannot be replayed. */
  private dropped = 0;
  /** The stream of that event: resuming right after it is still possible, and its id is checked against it. */
  private droppedStream: StreamKey | null = null;
  /** The session ended: its budget is given back, and nothing more is kept or counted. */
  private cleared = false;

  constructor(
    private readonly limits: ReplayLimits = DEFAULT_REPLAY_LIMITS,
    private readonly budget: ReplayBudget = { used: 0 },
  ) {}

  /** A new stream of the session: its key, for `append`. */
  stream(kind: 'g' | 'p'): StreamKey {
    return `${kind}${++this.streams}`;
  }

  /** Records one event of a stream; its SSE id. */
  append(stream: StreamKey, data: string, type?: string): string {
    const seq = ++this.seq;
    // A reply finishing after its session ended still writes its last event, but nobody can resume
    // it: kept, it would hold its bytes of the instance's budget for ever (nothing clears it again).
    if (this.cleared) return `${stream}-${seq}`;
    this.entries.push({ seq, stream, type, data });
    this.bytes += data.length;
    this.budget.used += data.length;
    while (
      this.entries.length > this.head &&
      (this.entries.length - this.head > this.limits.events ||
        this.bytes > this.limits.bytes ||
        this.budget.used > this.limits.totalBytes)
    ) {
      const old = this.entries[this.head]!;
      this.entries[this.head++] = undefined as unknown as Entry;
      this.bytes -= old.data.length;
      this.budget.used -= old.data.length;
      this.dropped = old.seq;
      this.droppedStream = old.stream;
    }
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
    return `${stream}-${seq}`;
  }

  /** Gives everything back (the session ended). */
  clear(): void {
    this.cleared = true;
    this.budget.used -= this.bytes;
    this.bytes = 0;
    if (this.entries.length > this.head) this.droppedStream = this.entries[this.entries.length - 1]!.stream;
    this.entries = [];
    this.head = 0;
    this.dropped = this.seq;
  }

  /**
   * The stream a Last-Event-ID names and its events after that id, or null when the id is not one
   * this session issued or events after it were already dropped (a gap the client would not see).
   */
  after(lastEventId: string): { stream: StreamKey; kind: 'g' | 'p'; events: Replayed[] } | null {
    const m = EVENT_ID.exec(lastEventId);
    if (!m) return null;
    const kind = m[1] as 'g' | 'p';
    const stream = `${kind}${m[2]}`;
    const seq = Number(m[3]);
    if (seq > this.seq || seq < this.dropped) return null;
    // Entries are in seq order and seqs are consecutive (the newest dropped one just before them).
    const first = this.entries[this.head];
    const at =
      first && seq >= first.seq ? this.entries[this.head + seq - first.seq]!.stream : this.droppedStream;
    // The event numbered `seq` must have been on the stream the id names: a well-formed id with
    // another stream or kind (`g1-1` when `p1-1` was sent) was never issued, and would resume the
    // wrong stream or none.
    if (at !== stream) return null;
    const events: Replayed[] = [];
    const from = first ? this.head + Math.max(0, seq + 1 - first.seq) : this.entries.length;
    for (let i = from; i < this.entries.length; i++) {
      const e = this.entries[i]!;
      if (e.stream === stream) events.push({ id: `${e.stream}-${e.seq}`, type: e.type, data: e.data });
    }
    return { stream, kind, events };
  }
}

/**
 * One SSE stream of a session as written: each event gets its id (recorded in the session's log
 * when it has one, else numbered per stream) and goes to the stream's current writer, which a
 * resumption replaces.
 */
export class McpStream {
  private n = 0;

  constructor(
    readonly key: StreamKey,
    private readonly log: ReplayLog | null,
    public writer: SseWriter,
  ) {}

  /** Writes one event; false when the writer is gone (nothing is recorded then). */
  send(data: string, type?: string): boolean {
    if (this.writer.gone) return false;
    const id = this.log ? this.log.append(this.key, data, type) : `${this.key}-${++this.n}`;
    return this.writer.event(data, type, id);
  }
}
