/**
 * What the service reports to Prometheus. Call sites use these narrow methods (one line each); the
 * metric names, labels and buckets live in `registry.ts` only.
 */
export interface Metrics {
  /** A decision recorded (validate, client-logged, MCP gateway). */
  decision(decision: string, mode: string): void;
  /** Time to answer a validation route (POST /v1/tools/validate, /v1/validate), by HTTP status. */
  validateLatency(route: string, status: number, seconds: number): void;
  /** One group-commit transaction of the decision log, committed by the writer thread or the event loop. */
  commitBatch(size: number, seconds: number, on: 'thread' | 'event_loop'): void;
  /** A request refused by a rate limit; `limit` names the limit (validate, decisions…). */
  rateLimited(limit: string): void;
  /** One request to an MCP upstream; outcome `ok` or the failure kind. */
  upstreamCall(method: string, outcome: string, seconds: number): void;
  /** An approval entering a state: requested, approved, denied, expired. */
  approval(state: string): void;
  /** Reports the number of open streams of one kind (sse, ws, mcp_sse) at every scrape. */
  trackStreams(kind: string, count: () => number): void;
  /** The text exposition of every metric, process metrics included. */
  render(): Promise<{ contentType: string; body: string }>;
}
