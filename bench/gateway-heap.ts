/**
 * Whether the MCP gateway keeps memory per call or per session: the service as a test app on a
 * fresh embedded store in a file, server-everything in a child (Streamable HTTP). Each round opens
 * HEAP_CLIENTS new SDK clients (one gateway session and one upstream session each), makes
 * HEAP_CALLS `tools/call echo` calls spread over them, ends their sessions (HEAP_END=delete, the
 * default: DELETE, as MCP asks of a client that leaves; HEAP_END=close: the client only
 * disconnects, and the session stays until it idles out), waits for the decision log,
 * and collects garbage fully; the heap then holds only what the service keeps. It prints the heap
 * after each round and what it grew per call and per session since the warm-up rounds. A leak
 * grows round after round; garbage promoted during a round is gone after the collection.
 * Run: node --expose-gc --conditions=@svc/source --import tsx bench/gateway-heap.ts
 * (HEAP_ROUNDS default 10, HEAP_CALLS default 4000, HEAP_CLIENTS default 8, HEAP_WARMUP default 2;
 * HEAP_SNAPSHOTS=<dir> writes a heap snapshot after the first measured round and after the last, to
 * compare in Chrome DevTools' Memory tab)
 */
import { mkdirSync } from 'node:fs';
import { writeHeapSnapshot } from 'node:v8';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createTestApp } from '../packages/server/test/helpers.js';
import { startEverything } from '../packages/server/test/mcp-everything.js';
import { ECHO_CALL, echoTenant } from './gateway-app.js';

const exposed = globalThis.gc;
if (!exposed) throw new Error('run with node --expose-gc');
const gc = exposed;
function count(name: string, fallback: number, min: number): number {
  const n = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} is an integer of at least ${min}`);
  return n;
}
const rounds = count('HEAP_ROUNDS', 10, 1);
const calls = count('HEAP_CALLS', 4000, 1);
const clients = count('HEAP_CLIENTS', 8, 1);
const warmup = count('HEAP_WARMUP', 2, 0);
const end = process.env.HEAP_END ?? 'delete';
if (end !== 'delete' && end !== 'close') throw new Error('HEAP_END is delete or close');
const snapshots = process.env.HEAP_SNAPSHOTS;
if (snapshots) mkdirSync(snapshots, { recursive: true });

/** Heap used after full collections, with the event loop turned between them (weak callbacks, finalizers). */
async function settledHeap(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
  return process.memoryUsage().heapUsed;
}

const everything = await startEverything('streamableHttp');
try {
  await measure();
} finally {
  await everything.stop();
}

async function measure(): Promise<void> {
  const t = await createTestApp({ writerThread: true });
  try {
    const base = await t.app.listen({ port: 0, host: '127.0.0.1' });
    const tenant = await echoTenant(t, everything.url);
    const call = ECHO_CALL;

    const round = async () => {
      const open = await Promise.all(
        Array.from({ length: clients }, async () => {
          const client = new Client({ name: 'bench', version: '1' });
          const transport = new StreamableHTTPClientTransport(new URL(`${base}/v1/mcp/e`), {
            requestInit: { headers: { 'x-service-api-key': tenant.apiKey } },
          });
          await client.connect(transport);
          return { client, transport };
        }),
      );
      let next = 0;
      await Promise.all(
        open.map(async ({ client }) => {
          while (next < calls) {
            next++;
            await client.callTool(call);
          }
        }),
      );
      // DELETE ends the session on the gateway at once; a client that only disconnects leaves it
      // (and what it holds for resumption) until it idles out.
      await Promise.all(
        open.map(async ({ client, transport }) => {
          if (end === 'delete') await transport.terminateSession();
          await client.close();
        }),
      );
      await t.ctx.writer.drain();
    };

    console.log(
      `command: node --expose-gc --conditions=@svc/source --import tsx bench/gateway-heap.ts (${rounds} rounds of ${calls} calls on ${clients} new sessions, ended by ${end})`,
    );
    const heaps: number[] = [];
    for (let r = 1; r <= rounds; r++) {
      const started = performance.now();
      await round();
      const heap = await settledHeap();
      heaps.push(heap);
      if (snapshots && (r === warmup + 1 || r === rounds)) {
        console.log(`heap snapshot ${writeHeapSnapshot(`${snapshots}/round-${r}.heapsnapshot`)}`);
      }
      const previous = heaps[heaps.length - 2];
      const delta =
        previous === undefined
          ? ''
          : `  ${((heap - previous) / calls).toFixed(0).padStart(5)} B per call since the last round`;
      console.log(
        `round ${String(r).padStart(2)}: heap ${(heap / 2 ** 20).toFixed(2)} MiB after ${((performance.now() - started) / 1000).toFixed(1)} s${delta}${r <= warmup ? '  (warm-up)' : ''}`,
      );
    }
    const measured = heaps.slice(warmup);
    if (measured.length >= 2) {
      const grown = measured[measured.length - 1]! - measured[0]!;
      const n = measured.length - 1;
      console.log(
        `after the warm-up: ${grown >= 0 ? '+' : ''}${(grown / 1024).toFixed(0)} KiB over ${n} rounds: ${(grown / (n * calls)).toFixed(1)} B per call, ${(grown / (n * clients)).toFixed(0)} B per session`,
      );
    }
    const recorded = await t.ctx.store.db
      .selectFrom('decisions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('organization_id', '=', tenant.orgId)
      .executeTakeFirstOrThrow();
    console.log(`calls made ${rounds * calls}, decisions recorded ${Number(recorded.n)}`);
  } finally {
    await t.close();
  }
}
