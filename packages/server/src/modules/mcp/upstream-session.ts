import { SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { ownMessage } from './http-fetch.js';
import { isObject, type Params, RPC, type RpcId } from './jsonrpc.js';
import type { UpstreamLimits } from './model.js';
import {
  type OpenOptions,
  openTransport,
  toUpstreamError,
  UpstreamError,
  type UpstreamTarget,
} from './upstream-client.js';
import { AnswerRefused, AnswerStreamEnded } from './upstream-error.js';

/** A request or notification the upstream sent on its own (sampling, roots, progress, logging…). */
export interface UpstreamMessage {
  jsonrpc: '2.0';
  id?: RpcId;
  method: string;
  params?: Params;
}

export interface UpstreamEvents {
  /**
   * A message the upstream sent by itself. For a request, false when it cannot be taken: more of
   * the upstream's requests already wait for an answer than MAX_WAITING_REQUESTS. That breaks a
   * bound, as an oversized message does: the session ends.
   */
  message(msg: UpstreamMessage, from: UpstreamSession): boolean;
  /** The connection is gone (closed, failed, or broke a bound); the session cannot be used again. */
  closed(reason: string): void;
}

interface Pending {
  resolve: (result: Record<string, unknown>) => void;
  reject: (err: UpstreamError) => void;
  timer: NodeJS.Timeout;
}

/**
 * Requests of the upstream that may wait for their answer: as many as a gateway session lets wait
 * for its client (sessions.ts), and as many refusals may wait to be sent.
 */
export const MAX_WAITING_REQUESTS = 100;

/** Messages (notifications, answers) that may wait to be sent to the upstream, one at a time. */
export const MAX_OUTBOX = 256;

const TOO_MANY_WAITING = `the upstream sent more than ${MAX_WAITING_REQUESTS} requests that wait for an answer`;

/** A transport that can give up the HTTP exchange of one request (StreamableHttpTransport). */
interface AbortsRequests {
  abortRequest?(id: RpcId): void;
}

/** A request sent upstream: its id there (for notifications/cancelled) and its outcome. */
export interface Sent {
  id: number;
  done: Promise<Record<string, unknown>>;
}

/** Why an SSE stream broke, as the event source reports it (it gives no message when the stream just ended). */
function streamLoss(err: SseError): string {
  const detail = err.event?.message;
  if (err.code !== undefined) return `HTTP ${err.code}${detail ? `: ${detail}` : ''}`;
  return detail || 'it ended';
}

/**
 * What makes a response to one of our requests unusable, or null: JSON-RPC wants exactly one of
 * `result` and `error`, an error an object with an integer `code` and a string `message`; every MCP
 * result is an object.
 */
function answerProblem(m: Record<string, unknown>): string | null {
  const hasResult = 'result' in m;
  const hasError = 'error' in m;
  if (hasResult && hasError) return 'it has both result and error';
  if (!hasResult && !hasError) return 'it has neither result nor error';
  if (hasResult) return isObject(m.result) ? null : 'its result is not an object';
  if (!isObject(m.error)) return 'its error is not an object';
  if (!Number.isInteger(m.error.code)) return 'its error code is not an integer';
  if (typeof m.error.message !== 'string') return 'its error message is not a string';
  return null;
}

/**
 * One MCP session with an upstream server, owned by exactly one gateway session. JSON-RPC messages
 * are relayed as they are, except request ids: the gateway numbers its requests itself, so a client
 * cannot collide with or answer for anything it did not send. Everything the upstream sends is
 * bounded (size and nesting depth, in the transport, before it is parsed) before the gateway
 * touches it. What the gateway sends on its own account (notifications, answers to the upstream's
 * requests) goes out through a bounded queue, one message at a time: an upstream that floods the
 * session with requests ends it rather than making the gateway open a connection per answer.
 */
export class UpstreamSession {
  private next = 0;
  private readonly pending = new Map<number, Pending>();
  private ended: string | null = null;
  private transport!: Transport;
  private observe: OpenOptions['observe'];
  /** Notifications and answers to send, in order; `posting` while one is on its way. */
  private outbox: JSONRPCMessage[] = [];
  private posting = false;
  /** Messages queued on the outbox so far, and those the upstream took (or refused) so far. */
  private queued = 0;
  private delivered = 0;
  /** Requests held until the messages queued before them were sent (`mark`: `queued` when made). */
  private held: { mark: number; send: () => void }[] = [];
  /** Answers to the upstream's requests queued or being sent. */
  private unsentAnswers = 0;

  private constructor(
    private readonly target: UpstreamTarget,
    private readonly limits: UpstreamLimits,
    private readonly events: UpstreamEvents,
  ) {}

  /**
   * Connects and runs the client's own initialize (its capabilities, protocol version and
   * clientInfo) upstream; returns the session and the upstream's InitializeResult.
   */
  static async open(
    target: UpstreamTarget,
    options: OpenOptions,
    limits: UpstreamLimits,
    initialize: Params,
    events: UpstreamEvents,
  ): Promise<{ session: UpstreamSession; result: Record<string, unknown>; version: string }> {
    const session = new UpstreamSession(target, limits, events);
    session.observe = options.observe;
    session.transport = await openTransport(target, options, limits, {
      oversize: (why) => session.fail(why),
      refused: (top, why) => session.refuse(top, why),
    });
    session.transport.onmessage = (m) => session.receive(m);
    session.transport.onerror = (err) => {
      // HTTP+SSE: the event stream is the session (its endpoint URL names it) and the only way
      // answers come back; the SDK reports it broken only here, then reconnects to a session of its
      // own that was never initialized. So a lost stream fails the session: requests in flight end
      // now, not at their timeouts. Other errors (an unparsable event, a failed POST of a
      // notification; for Streamable HTTP also a dropped standalone GET stream, which is retried)
      // leave the session be: a failed request fails on its own, and one lost answer ends in its
      // request's timeout.
      if (err instanceof SseError) session.fail(`the upstream event stream was lost (${streamLoss(err)})`);
    };
    session.transport.onclose = () => session.fail('the upstream connection closed');
    try {
      await session.withDeadline(session.transport.start(), 'connect');
      const result = await session.request('initialize', initialize).done;
      const version = result.protocolVersion;
      if (typeof version !== 'string')
        throw new UpstreamError('invalid', 'upstream initialize result has no protocolVersion');
      session.transport.setProtocolVersion?.(version);
      return { session, result, version };
    } catch (err) {
      await session.close();
      throw toUpstreamError(err);
    }
  }

  get closedReason(): string | null {
    return this.ended;
  }

  /** Sends a request; `done` settles with its result or an UpstreamError (kind `rpc` for a JSON-RPC error). */
  request(method: string, params: Params | undefined, timeoutMs = this.target.timeoutMs): Sent {
    const id = ++this.next;
    const done = new Promise<Record<string, unknown>>((resolve, reject) => {
      if (this.ended) return reject(new UpstreamError('unreachable', this.ended));
      if (this.pending.size >= this.limits.maxInflight) {
        return reject(
          new UpstreamError(
            'refused',
            `more than ${this.limits.maxInflight} requests in flight in this session`,
          ),
        );
      }
      const timer = setTimeout(() => {
        this.settle(id)?.reject(new UpstreamError('timeout', `no answer within ${timeoutMs} ms`));
        this.giveUp(id, 'timeout');
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      const message = { jsonrpc: '2.0' as const, id, method, ...(params ? { params } : {}) };
      const send = () => {
        // Timed out or cancelled while it waited: nothing to send.
        if (!this.pending.has(id)) return;
        this.transport.send(message).catch((err) => {
          const e = toUpstreamError(err);
          this.settle(id)?.reject(e);
          // The POST itself failed (refused, 404 for an expired session…): the session is gone; the
          // client learns it (404) at its next request and initializes again, as MCP prescribes. An
          // answer stream that ended early, or an answer that cannot be used, loses only this request.
          if (method !== 'initialize' && !(err instanceof AnswerStreamEnded || err instanceof AnswerRefused))
            this.fail(`the upstream session failed: ${e.message}`);
        });
      };
      // The session's messages reach the upstream in the order the client sent them: a request
      // waits for the notifications and answers queued before it (notifications/initialized, after
      // which an upstream may first offer some tools, is the one that matters most).
      if (this.delivered < this.queued) this.held.push({ mark: this.queued, send });
      else send();
    });
    if (this.observe) {
      const started = performance.now();
      const seconds = () => (performance.now() - started) / 1000;
      done.then(
        () => this.observe?.(method, 'ok', seconds()),
        (err) => this.observe?.(method, toUpstreamError(err).kind, seconds()),
      );
    }
    return { id, done };
  }

  /**
   * A request nobody waits for any more: notifications/cancelled upstream, and its HTTP exchange (if
   * still open) closed, so a request the upstream never answers holds no connection.
   */
  private giveUp(id: number, reason: string): void {
    this.notify('notifications/cancelled', { requestId: id, reason });
    (this.transport as Transport & AbortsRequests).abortRequest?.(id);
  }

  /** Abandons a request: cancelled upstream, settled here with `err`. */
  abandon(id: number, err: UpstreamError): void {
    const p = this.settle(id);
    if (!p) return;
    this.giveUp(id, err.message);
    p.reject(err);
  }

  notify(method: string, params: Params | undefined): void {
    this.post({ jsonrpc: '2.0', method, ...(params ? { params } : {}) });
  }

  /** An answer to one of the upstream's own requests (sampling, elicitation, roots): the client's, or a refusal. */
  respond(message: JSONRPCMessage): void {
    this.post(message);
  }

  /**
   * Queues a message the gateway sends on its own account. More answers waiting than the upstream
   * may leave requests waiting, or a full queue, means the upstream sends faster than it takes
   * messages: a bound broken, which ends the session.
   */
  private post(message: JSONRPCMessage): void {
    if (this.ended) return;
    const answer = !('method' in message);
    if (answer && this.unsentAnswers >= MAX_WAITING_REQUESTS) {
      this.fail(TOO_MANY_WAITING);
      return;
    }
    if (this.outbox.length >= MAX_OUTBOX) {
      this.fail(`more than ${MAX_OUTBOX} messages wait to be sent to the upstream`);
      return;
    }
    if (answer) this.unsentAnswers++;
    this.outbox.push(message);
    this.queued++;
    if (!this.posting) void this.drain();
  }

  /**
   * Sends the queue, one message at a time. A message the upstream refuses is lost (as a lost
   * notification is); one it does not take within timeoutMs ends the session.
   */
  private async drain(): Promise<void> {
    this.posting = true;
    while (!this.ended) {
      const message = this.outbox.shift();
      if (!message) break;
      try {
        await this.withDeadline(
          ownMessage.run(true, () => this.transport.send(message)),
          'send',
        );
      } catch (err) {
        if (err instanceof UpstreamError && err.kind === 'timeout')
          this.fail(`the upstream took no message within ${this.target.timeoutMs} ms`);
      } finally {
        if (!('method' in message)) this.unsentAnswers--;
        this.delivered++;
        this.sendHeld();
      }
    }
    this.posting = false;
  }

  /** Sends the requests whose earlier messages have all been sent. */
  private sendHeld(): void {
    while (this.held.length > 0 && this.held[0]!.mark <= this.delivered && !this.ended)
      this.held.shift()!.send();
  }

  private settle(id: number): Pending | undefined {
    const p = this.pending.get(id);
    if (!p) return undefined;
    this.pending.delete(id);
    clearTimeout(p.timer);
    return p;
  }

  /**
   * A message refused for its nesting, before it was parsed (the transport gives its top level): a
   * response fails its request, a request is answered -32600, a notification is dropped.
   */
  private refuse(top: Record<string, unknown> | null, why: string): void {
    if (this.ended || !top) return;
    if (!('method' in top)) {
      if (typeof top.id === 'number') this.settle(top.id)?.reject(new UpstreamError('invalid', why));
    } else if (typeof top.id === 'number' || typeof top.id === 'string') {
      this.respond({ jsonrpc: '2.0', id: top.id, error: { code: RPC.invalidRequest, message: why } });
    }
  }

  private receive(raw: JSONRPCMessage): void {
    // Nothing of a session that ended reaches anyone (its streams may still be closing).
    if (this.ended) return;
    const m = raw as Record<string, unknown>;
    if (!('method' in m)) {
      if (typeof m.id !== 'number') return;
      const p = this.settle(m.id);
      if (!p) return;
      // Nothing is made up for a malformed answer: a result the upstream did not send would be
      // bound into a receipt as if it had, and an error would pass as a success.
      const problem = answerProblem(m);
      if (problem) p.reject(new UpstreamError('invalid', `upstream sent an invalid answer: ${problem}`));
      else if (isObject(m.result)) p.resolve(m.result);
      else {
        const e = m.error as { code: number; message: string; data?: unknown };
        p.reject(
          new UpstreamError('rpc', `upstream answered error ${e.code}: ${e.message}`, {
            code: e.code,
            message: e.message,
            ...(e.data !== undefined ? { data: e.data } : {}),
          }),
        );
      }
      return;
    }
    const msg = m as unknown as UpstreamMessage;
    if (!this.events.message(msg, this) && msg.id !== undefined) this.fail(TOO_MANY_WAITING);
  }

  private withDeadline<T>(work: Promise<T>, what: string, max = this.target.timeoutMs): Promise<T> {
    const ms = Math.min(max, this.target.timeoutMs);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new UpstreamError('timeout', `${what}: no answer within ${ms} ms`)),
        ms,
      );
    });
    return Promise.race([work, expired]).finally(() => clearTimeout(timer));
  }

  /** The session broke: every pending request fails with the reason, and the owner is told. */
  fail(reason: string): void {
    if (this.ended) return;
    this.ended = reason;
    this.outbox = [];
    this.held = [];
    for (const id of [...this.pending.keys()])
      this.settle(id)?.reject(new UpstreamError('unreachable', reason));
    this.events.closed(reason);
    void this.shutdown();
  }

  /** Ends the session upstream (Streamable HTTP: DELETE) and closes the connection. */
  async close(): Promise<void> {
    if (!this.ended) {
      this.ended = 'the session ended';
      this.outbox = [];
      this.held = [];
      for (const id of [...this.pending.keys()])
        this.settle(id)?.reject(new UpstreamError('unreachable', 'the session ended'));
    }
    await this.shutdown();
  }

  private closing: Promise<void> | null = null;

  private shutdown(): Promise<void> {
    this.closing ??= (async () => {
      const t = this.transport as Transport & { terminateSession?: () => Promise<void> };
      if (!t) return;
      t.onclose = undefined;
      // Ending the session upstream is a courtesy: it must not hold a shutdown for long.
      if (t.terminateSession && t.sessionId)
        await this.withDeadline(t.terminateSession(), 'end session', 2000).catch(() => {});
      await t.close().catch(() => {});
    })();
    return this.closing;
  }
}
