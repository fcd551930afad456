import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, createTestApp, type Tenant, type TestApp } from './helpers.js';
import { type Everything, startEverything } from './mcp-everything.js';
import { createUpstream, rawRpc, rawSession } from './mcp-helpers.js';
import { SseClient, waitFor } from './streams.js';

/**
 * SSE resumption (MCP Streamable HTTP): every event the gateway sends has an id, and a client whose
 * stream broke gets the events it missed by GET with Last-Event-ID, then the rest of that stream.
 */

let t: TestApp;
let everything: Everything;
let tenant: Tenant;
let url: string;
const open: SseClient[] = [];

beforeAll(async () => {
  everything = await startEverything('streamableHttp');
  t = await createTestApp();
  const base = await t.app.listen({ port: 0, host: '127.0.0.1' });
  tenant = await createTenant(t);
  await createUpstream(t, tenant, { name: 'resume', slug: 'resume', url: everything.url, timeoutMs: 10_000 });
  url = `${base}/v1/mcp/resume`;
});
afterAll(async () => {
  for (const c of open) c.close();
  await t.close();
  await everything.stop();
});

const key = () => ({ 'x-service-api-key': tenant.apiKey });

const session = () => rawSession(url, key(), 'r');

async function get(headers: Record<string, string>): Promise<SseClient> {
  const c = await SseClient.open(url, { accept: 'text/event-stream', ...headers });
  open.push(c);
  return c;
}

const seqOf = (id: string | undefined) => Number(id?.split('-')[1]);

describe('MCP gateway SSE resumption', () => {
  it('resumes a broken POST answer stream: the missed progress and the response come on the GET', async () => {
    const headers = await session();
    const call = await SseClient.post(
      url,
      {
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: {
          name: 'trigger-long-running-operation',
          arguments: { duration: 1, steps: 5 },
          _meta: { progressToken: 'tok' },
        },
      },
      { ...headers, accept: 'application/json, text/event-stream' },
    );
    const first = await call.waitForEvent(() => true, 'the first progress event');
    expect(first.id).toMatch(/^p\d+-\d+$/);
    expect(first.data).toMatchObject({ method: 'notifications/progress', params: { progress: 1 } });
    // The connection breaks after the first event.
    call.close();

    const resumed = await get({ ...headers, 'last-event-id': first.id! });
    expect(resumed.status).toBe(200);
    const answer = await resumed.waitForEvent((e) => (e.data as { id?: number }).id === 7, 'the response');
    expect(answer.data).toMatchObject({
      result: { _meta: { veto_receipt: { receipt_hash: expect.stringMatching(/^sha256:/) } } },
    });
    // Progress 2..5 then the response, each once, in order, on the same stream as the first event.
    const progress = resumed.events.filter(
      (e) => (e.data as { method?: string }).method === 'notifications/progress',
    );
    expect(progress.map((e) => (e.data as { params: { progress: number } }).params.progress)).toEqual([
      2, 3, 4, 5,
    ]);
    const ids = resumed.events.map((e) => e.id!);
    const stream = first.id!.split('-')[0];
    expect(ids.every((id) => id.startsWith(`${stream}-`))).toBe(true);
    expect(ids.map(seqOf)).toEqual([...ids.map(seqOf)].sort((a, b) => a - b));
    expect(seqOf(ids[0])).toBeGreaterThan(seqOf(first.id));
    await waitFor(() => resumed.ended, 'the resumed stream to end after the response');

    // Resuming again (the response was lost once more) replays the same events with the same ids.
    const again = await get({ ...headers, 'last-event-id': first.id! });
    await waitFor(() => again.ended, 'the replay to end');
    expect(again.events.map((e) => e.id)).toEqual(ids);
    // After the response's own id there is nothing left.
    const done = await get({ ...headers, 'last-event-id': answer.id! });
    await waitFor(() => done.ended, 'the empty replay to end');
    expect(done.status).toBe(200);
    expect(done.events).toEqual([]);
  });

  it("resumes a session's GET stream: the events after the id, then the stream goes on", async () => {
    const headers = await session();
    const stream = await get(headers);
    const hello = await stream.waitForEvent(() => true, 'notifications/session');
    expect(hello.id).toMatch(/^g\d+-\d+$/);
    const echo = await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'echo', arguments: { message: 'one' } },
      },
      { ...headers, accept: 'application/json' },
    );
    expect(echo.status).toBe(200);
    const decision = await stream.waitForEvent((e) => e.event === 'decision', 'the decision event');
    expect(seqOf(decision.id)).toBeGreaterThan(seqOf(hello.id));

    // As if the client had missed the decision: it resumes after the session notification. The
    // resumed connection replaces the old one and starts with the missed decision, same id.
    const resumed = await get({ ...headers, 'last-event-id': hello.id! });
    const replayed = await resumed.waitForEvent((e) => e.event === 'decision', 'the replayed decision');
    expect(replayed).toEqual(decision);
    await waitFor(() => stream.ended, 'the replaced connection to close');
    expect(
      resumed.events.some((e) => (e.data as { method?: string }).method === 'notifications/session'),
    ).toBe(false);
    // New events keep coming on the resumed stream, with the same stream key.
    await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'echo', arguments: { message: 'two' } },
      },
      { ...headers, accept: 'application/json' },
    );
    await waitFor(
      () => resumed.events.filter((e) => e.event === 'decision').length === 2,
      'the next decision',
    );
    const next = resumed.events.at(-1)!;
    expect(next.id!.split('-')[0]).toBe(hello.id!.split('-')[0]);
  });

  it('answers 409 for an id it cannot resume from and 400 without a session; both change nothing', async () => {
    const headers = await session();
    for (const id of ['g99-1', 'nonsense', 'p1-999999']) {
      const res = await fetch(url, {
        headers: { ...headers, accept: 'text/event-stream', 'last-event-id': id },
      });
      expect(res.status, id).toBe(409);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('conflict');
    }
    const res = await fetch(url, {
      headers: { ...key(), accept: 'text/event-stream', 'last-event-id': 'g1-1' },
    });
    expect(res.status).toBe(400);
    // The session still works.
    const ping = await rawRpc(url, { jsonrpc: '2.0', id: 3, method: 'ping' }, headers);
    expect(ping.json()).toEqual({ jsonrpc: '2.0', id: 3, result: {} });
  });

  it('answers 409 for a well-formed id the session never issued (another stream or kind at that number)', async () => {
    const headers = await session();
    // A one-event answer (a POST stream), then a GET stream: one event each, on two streams.
    const answer = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 5, method: 'ping' },
      { ...headers, accept: 'text/event-stream' },
    );
    const posted = /^id: (p\d+-\d+)\n/.exec(answer.text)![1]!;
    const stream = await get(headers);
    const hello = await stream.waitForEvent(() => true, 'notifications/session');
    const [p, pSeq] = posted.split('-') as [string, string];
    const [g, gSeq] = hello.id!.split('-') as [string, string];
    // Each names a stream the session has, at a number it issued, but the event there was the other's.
    const wrong = [`g${p.slice(1)}-${pSeq}`, `${p}-${gSeq}`, `p${g.slice(1)}-${gSeq}`, `${g}-${pSeq}`];
    expect(wrong.every((id) => /^[gp]\d+-\d+$/.test(id))).toBe(true);
    for (const id of wrong) {
      const res = await fetch(url, {
        headers: { ...headers, accept: 'text/event-stream', 'last-event-id': id },
      });
      expect(res.status, id).toBe(409);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('conflict');
    }
    // Nothing changed: the GET stream is still open and the ids actually issued still resume.
    expect(stream.ended).toBe(false);
    const again = await get({ ...headers, 'last-event-id': posted });
    expect(again.status).toBe(200);
    await waitFor(() => again.ended, 'the empty replay of the answered POST to end');
    expect(again.events).toEqual([]);
    const resumed = await get({ ...headers, 'last-event-id': hello.id! });
    expect(resumed.status).toBe(200);
    await waitFor(() => stream.ended, 'the replaced GET connection to close');
  });

  it('gives one-event SSE answers an id too, and an unmodified SDK client works with the ids', async () => {
    const headers = await session();
    const res = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 4, method: 'tools/list' },
      {
        ...headers,
        accept: 'text/event-stream',
      },
    );
    expect(res.text).toMatch(/^id: p\d+-\d+\nevent: message\ndata: /);
    const client = new Client({ name: 'sdk', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: key() } }),
    );
    const seen: number[] = [];
    const result = await client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 0.2, steps: 2 } },
      undefined,
      { onprogress: (p) => seen.push(p.progress) },
    );
    expect(result.content).toBeDefined();
    expect(seen).toEqual([1, 2]);
    await client.close();
  });
});
