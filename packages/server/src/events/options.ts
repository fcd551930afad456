/** Timing and buffering of the event connections; tests shorten them. */
export interface StreamOptions {
  /** SSE `:ping` comment interval (spec: 15 s); credentials are re-checked at the same pace. */
  sseHeartbeatMs: number;
  /** WebSocket ping interval (spec: 30 s); a client that has not answered the previous ping is terminated. */
  wsHeartbeatMs: number;
  /** Bytes waiting to be sent to one connection beyond which it is dropped as too slow. */
  maxBufferedBytes: number;
}

export const DEFAULT_STREAM_OPTIONS: StreamOptions = {
  sseHeartbeatMs: 15_000,
  wsHeartbeatMs: 30_000,
  maxBufferedBytes: 1024 * 1024,
};
