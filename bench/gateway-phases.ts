/**
 * Where a gateway call's time goes, in one process: the service (test app on a fresh embedded store in
 * a file, so commits fsync), server-everything in a child, one SDK client, `tools/call echo` one in
 * flight. Each phase is the median time since the request reached the HTTP server: the policy
 * checked (enforce entered), the upstream request sent, its answer, the record handed to the group
 * commit, a lone call's commit on the event loop begun and done (when it runs there), the commit
 * done, the response written. On a loaded machine every phase stretches, but
 * their order and relative size show what the answer waits for.
 * Run: node --conditions=@svc/source --import tsx bench/gateway-phases.ts (BENCH_GATEWAY_CALLS, default 1000;
 * SVC_WRITER_THREAD=false commits every batch on the event loop)
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { NoWaitSqliteBatchStore } from '../packages/server/src/ledger/store-sqlite.js';
import { DecisionWriter } from '../packages/server/src/ledger/writer.js';
import { UpstreamSession } from '../packages/server/src/modules/mcp/upstream-session.js';
import { createTestApp } from '../packages/server/test/helpers.js';
import { startEverything } from '../packages/server/test/mcp-everything.js';
import { ECHO_CALL, echoTenant } from './gateway-app.js';

const marks: Record<string, number[]> = {};
let t0 = 0;
const mark = (k: string) => {
  const list = marks[k] ?? [];
  list.push(performance.now() - t0);
  marks[k] = list;
};

const request = UpstreamSession.prototype.request;
UpstreamSession.prototype.request = function (this: UpstreamSession, ...a: Parameters<typeof request>) {
  mark('2 upstream request sent');
  const sent = request.apply(this, a);
  sent.done.then(
    () => mark('3 upstream answered'),
    () => {},
  );
  return sent;
};
const write = DecisionWriter.prototype.write;
DecisionWriter.prototype.write = function (this: DecisionWriter, item) {
  mark('4 record to group commit');
  const p = write.call(this, item);
  p.then(
    () => mark('5 committed'),
    () => {},
  );
  return p;
};

// A lone call's commit on the event loop (ledger/writer.ts): from the batch's start to its COMMIT's
// return, receipt hashing and the fsync included; the phases around it are the group commit's own.
const commitInline = NoWaitSqliteBatchStore.prototype.commit;
NoWaitSqliteBatchStore.prototype.commit = async function (this: NoWaitSqliteBatchStore, batches) {
  mark('4a lone commit begun');
  try {
    return await commitInline.call(this, batches);
  } finally {
    mark('4b lone commit done');
  }
};
const calls = Number(process.env.BENCH_GATEWAY_CALLS ?? 1000);
const everything = await startEverything('streamableHttp');
const t = await createTestApp({ writerThread: process.env.SVC_WRITER_THREAD !== 'false' });
try {
  const enforcement = t.ctx.enforcement as unknown as { enforce: (r: unknown) => Promise<unknown> };
  const enforce = enforcement.enforce;
  enforcement.enforce = function (r) {
    mark('1 enforce entered');
    return enforce.call(this, r);
  };
  const base = await t.app.listen({ port: 0, host: '127.0.0.1' });
  t.app.server.prependListener('request', (_req, res) => {
    t0 = performance.now();
    res.on('finish', () => mark('6 response written'));
  });
  const tenant = await echoTenant(t, everything.url);
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/v1/mcp/e`), {
      requestInit: { headers: { 'x-service-api-key': tenant.apiKey } },
    }),
  );
  const call = ECHO_CALL;
  for (let i = 0; i < Math.min(300, calls); i++) await client.callTool(call);
  for (const k of Object.keys(marks)) marks[k] = [];
  for (let i = 0; i < calls; i++) await client.callTool(call);
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`command: node --conditions=@svc/source --import tsx bench/gateway-phases.ts (${calls} calls)`);
  let previous = 0;
  for (const k of Object.keys(marks).sort()) {
    const m = median(marks[k]!);
    console.log(
      `${k.padEnd(28)} median ${m.toFixed(3)} ms since the request arrived (+${(m - previous).toFixed(3)} ms)`,
    );
    previous = m;
  }
  await client.close();
} finally {
  await t.close();
  await everything.stop();
}
