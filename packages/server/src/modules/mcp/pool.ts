import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ResultSchema, type ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { Metrics } from '../../metrics/model.js';
import type { Params } from './jsonrpc.js';
import {
  type OpenOptions,
  openClient,
  toUpstreamError,
  UpstreamError,
  type UpstreamTarget,
  withTimeout,
} from './upstream-client.js';

interface Entry {
  fingerprint: string;
  ready: Promise<Client>;
  inflight: number;
  retired: boolean;
  closing: boolean;
}

export interface UpstreamInfo {
  capabilities: ServerCapabilities | undefined;
  instructions: string | undefined;
}

/** Same connection settings: the pooled client may be reused. The timeout is per call, not per connection. */
const fingerprint = (t: UpstreamTarget) =>
  JSON.stringify([t.transport, t.url, Object.entries(t.headers).sort(([a], [b]) => (a < b ? -1 : 1))]);

/**
 * One SDK client per upstream in this instance, connected on first use and shared by every call.
 * There is no lock across upstreams or calls: each call waits only for its own upstream's answer,
 * bounded by that upstream's timeoutMs. A call that fails for any reason other than a JSON-RPC error
 * answer retires the client, so the next call connects afresh; the retired client is closed once
 * its in-flight calls have finished.
 */
export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();
  private closed = false;

  constructor(
    private readonly options: OpenOptions,
    private readonly metrics?: Pick<Metrics, 'upstreamCall'>,
  ) {}

  /** Sends one request upstream and returns its result as received. Throws UpstreamError. */
  async request(
    target: UpstreamTarget,
    method: string,
    params: Params | undefined,
  ): Promise<Record<string, unknown>> {
    const entry = this.acquire(target);
    entry.inflight++;
    const aborter = new AbortController();
    const started = Date.now();
    try {
      const onTimeout = () =>
        aborter.abort(new UpstreamError('timeout', `no answer within ${target.timeoutMs} ms`));
      const client = await withTimeout(entry.ready, target.timeoutMs, onTimeout);
      const left = Math.max(1, target.timeoutMs - (Date.now() - started));
      // Our own timer decides (the SDK's is set later so it never fires first); aborting also sends
      // notifications/cancelled upstream.
      const result = await withTimeout(
        client.request({ method, params }, ResultSchema, { signal: aborter.signal, timeout: left + 1000 }),
        left,
        onTimeout,
      );
      this.metrics?.upstreamCall(method, 'ok', (Date.now() - started) / 1000);
      return result;
    } catch (err) {
      const e = aborter.signal.aborted ? (aborter.signal.reason as UpstreamError) : toUpstreamError(err);
      this.metrics?.upstreamCall(method, e.kind, (Date.now() - started) / 1000);
      if (e.kind !== 'rpc') this.retire(target.id, entry);
      throw e;
    } finally {
      entry.inflight--;
      this.closeIfDone(entry);
    }
  }

  /** The upstream's capabilities and instructions from its handshake (connecting if needed). */
  async info(target: UpstreamTarget): Promise<UpstreamInfo> {
    const entry = this.acquire(target);
    try {
      const client = await withTimeout(entry.ready, target.timeoutMs, () => {});
      return { capabilities: client.getServerCapabilities(), instructions: client.getInstructions() };
    } catch (err) {
      this.retire(target.id, entry);
      throw toUpstreamError(err);
    }
  }

  /** Forgets the pooled client of an upstream whose configuration changed or that was deleted. */
  drop(upstreamId: string): void {
    const entry = this.entries.get(upstreamId);
    if (entry) this.retire(upstreamId, entry);
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((e) => e.ready.then((c) => c.close()).catch(() => {})));
  }

  private acquire(target: UpstreamTarget): Entry {
    if (this.closed) throw new UpstreamError('unreachable', 'the gateway is shutting down');
    const fp = fingerprint(target);
    const current = this.entries.get(target.id);
    if (current && current.fingerprint === fp) return current;
    if (current) this.retire(target.id, current);
    const entry: Entry = {
      fingerprint: fp,
      ready: openClient(target, this.options),
      inflight: 0,
      retired: false,
      closing: false,
    };
    // Nobody may be waiting when it fails; the failure is reported to the callers that are.
    entry.ready.catch(() => this.retire(target.id, entry));
    entry.ready.then(
      (client) => {
        // The transport closed by itself (SSE stream ended): the next call reconnects.
        client.onclose = () => this.retire(target.id, entry);
        if (this.closed) void client.close().catch(() => {});
      },
      () => {},
    );
    this.entries.set(target.id, entry);
    return entry;
  }

  private retire(id: string, entry: Entry): void {
    if (this.entries.get(id) === entry) this.entries.delete(id);
    entry.retired = true;
    this.closeIfDone(entry);
  }

  private closeIfDone(entry: Entry): void {
    if (!entry.retired || entry.inflight > 0 || entry.closing) return;
    entry.closing = true;
    entry.ready.then((c) => c.close()).catch(() => {});
  }
}
