import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Metrics } from './model.js';

/** Latency buckets in seconds, 0.5 ms to 5 s: validate answers in milliseconds, upstreams in more. */
const LATENCY = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

let processRegistry: Registry | null = null;

/**
 * Process metrics (CPU, memory, event loop, GC, handles) belong to the process, not to one app:
 * collected once per process, whatever the number of apps built in it (tests build many).
 */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/**
 * The method label of the MCP upstream series: the protocol's request methods by name, anything
 * else a client sent (a method name is any string it chooses) as `other`. Otherwise one tenant's
 * text would be a label of the operator's metrics, and the series would grow without bound.
 */
const MCP_METHODS: ReadonlySet<string> = new Set([
  'initialize',
  'ping',
  'tools/list',
  'tools/call',
  'resources/list',
  'resources/templates/list',
  'resources/read',
  'resources/subscribe',
  'resources/unsubscribe',
  'prompts/list',
  'prompts/get',
  'completion/complete',
  'logging/setLevel',
  'tasks/get',
  'tasks/result',
  'tasks/list',
  'tasks/cancel',
]);

export function createMetrics(): Metrics {
  // Process CPU is counted from the first collection on: start it with the app, not at the first scrape.
  const proc = processMetrics();
  const registry = new Registry();
  const registers = [registry];
  const decisions = new Counter({
    name: 'svc_decisions_total',
    help: 'Decisions recorded, by decision and policy mode',
    labelNames: ['decision', 'mode'] as const,
    registers,
  });
  const validate = new Histogram({
    name: 'svc_validate_duration_seconds',
    help: 'Time to answer a validation route (/v1/tools/validate, /v1/validate), by route and HTTP status',
    labelNames: ['route', 'status'] as const,
    buckets: LATENCY,
    registers,
  });
  const batchSize = new Histogram({
    name: 'svc_decision_commit_batch_size',
    help: 'Decisions committed per group-commit transaction',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers,
  });
  const commitTime = new Histogram({
    name: 'svc_decision_commit_duration_seconds',
    help: 'Duration of one group-commit transaction of the decision log',
    buckets: LATENCY,
    registers,
  });
  const commits = new Counter({
    name: 'svc_decision_commits_total',
    help: 'Group-commit transactions of the decision log, by where they ran (thread or event_loop)',
    labelNames: ['on'] as const,
    registers,
  });
  const rateLimited = new Counter({
    name: 'svc_rate_limit_rejections_total',
    help: 'Requests refused with 429 by a rate limit',
    labelNames: ['limit'] as const,
    registers,
  });
  const upstreamCalls = new Counter({
    name: 'svc_mcp_upstream_requests_total',
    help: 'Requests sent to MCP upstreams, by JSON-RPC method and outcome',
    labelNames: ['method', 'outcome'] as const,
    registers,
  });
  const upstreamTime = new Histogram({
    name: 'svc_mcp_upstream_request_duration_seconds',
    help: 'Time until an MCP upstream answered (or failed), by JSON-RPC method and outcome',
    labelNames: ['method', 'outcome'] as const,
    buckets: LATENCY,
    registers,
  });
  const approvals = new Counter({
    name: 'svc_approvals_total',
    help: 'Approvals entering a state: requested, approved, denied, expired',
    labelNames: ['state'] as const,
    registers,
  });
  const streamCounts = new Map<string, () => number>();
  new Gauge({
    name: 'svc_open_streams',
    help: 'Open event streams of this process, by kind (sse, ws, mcp_sse)',
    labelNames: ['kind'] as const,
    registers,
    collect() {
      for (const [kind, count] of streamCounts) this.set({ kind }, count());
    },
  });

  return {
    decision: (decision, mode) => decisions.inc({ decision, mode }),
    validateLatency: (route, status, seconds) => validate.observe({ route, status: String(status) }, seconds),
    commitBatch(size, seconds, on) {
      commits.inc({ on });
      batchSize.observe(size);
      commitTime.observe(seconds);
    },
    rateLimited: (limit) => rateLimited.inc({ limit }),
    upstreamCall(sent, outcome, seconds) {
      const method = MCP_METHODS.has(sent) ? sent : 'other';
      upstreamCalls.inc({ method, outcome });
      upstreamTime.observe({ method, outcome }, seconds);
    },
    approval: (state) => approvals.inc({ state }),
    trackStreams: (kind, count) => void streamCounts.set(kind, count),
    async render() {
      const own = await registry.metrics();
      return { contentType: registry.contentType, body: `${await proc.metrics()}\n${own}` };
    },
  };
}
