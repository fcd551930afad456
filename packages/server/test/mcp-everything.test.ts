import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import type { RequestTaskStore } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LATEST_PROTOCOL_VERSION,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from './fixture.js';
import { createTenant, type Tenant } from './helpers.js';
import { type Everything, type EverythingMode, startEverything } from './mcp-everything.js';
import { createUpstream, rawRpc } from './mcp-helpers.js';

/**
 * Compatibility: the reference server, reached by the official SDK client directly and through the
 * gateway, must answer every method and feature the same way (apart from the receipt in _meta).
 */

interface Observed {
  client: Client;
  logs: { level: string; data: unknown }[];
  updates: string[];
  sampled: string[];
  elicited: number;
  /** URL-mode elicitations: their url and elicitationId. */
  urlElicited: { url: string; elicitationId: string }[];
  rootsAsked: number;
  /** Server requests the client ran as tasks of its own (task-augmented sampling and elicitation). */
  clientTasks: string[];
}

const ROOTS = [{ uri: 'file:///tmp/compat-root', name: 'compat root' }];

async function connectClient(url: string, mode: EverythingMode | 'gateway', headers: Record<string, string>) {
  const o: Observed = {
    client: new Client(
      { name: 'compat-client', version: '1.0.0' },
      {
        capabilities: {
          sampling: {},
          elicitation: { form: {}, url: {} },
          roots: { listChanged: true },
          // The client runs task-augmented sampling and elicitation (the server polls it with tasks/*).
          tasks: {
            list: {},
            cancel: {},
            requests: { sampling: { createMessage: {} }, elicitation: { create: {} } },
          },
        },
        taskStore: new InMemoryTaskStore(),
      },
    ),
    logs: [],
    updates: [],
    sampled: [],
    elicited: 0,
    urlElicited: [],
    rootsAsked: 0,
    clientTasks: [],
  };
  // A task-augmented server request: the client answers with a task, already completed with `result`.
  type TaskExtra = { taskStore?: RequestTaskStore };
  async function asTask(
    method: string,
    ttl: number | undefined,
    extra: TaskExtra,
    result: Record<string, unknown>,
  ) {
    const task = await extra.taskStore!.createTask({ ttl: ttl ?? 60_000 });
    await extra.taskStore!.storeTaskResult(task.taskId, 'completed', result as never);
    o.clientTasks.push(method);
    return { task };
  }
  o.client.setRequestHandler(CreateMessageRequestSchema, async (req, extra) => {
    const first = req.params.messages[0]?.content;
    const text = first && 'text' in first ? String(first.text) : '';
    o.sampled.push(text);
    const result = {
      model: 'compat-model',
      role: 'assistant' as const,
      content: { type: 'text' as const, text: `sampled: ${text}` },
    };
    if (req.params.task) return asTask(req.method, req.params.task.ttl, extra, result);
    return result;
  });
  o.client.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
    if (req.params.mode === 'url') {
      o.urlElicited.push({ url: req.params.url, elicitationId: req.params.elicitationId });
      return { action: 'accept' };
    }
    o.elicited++;
    const props = Object.keys(req.params.requestedSchema?.properties ?? {});
    // The research task asks which interpretation is meant: the first one offered.
    if (props.includes('interpretation'))
      return { action: 'accept', content: { interpretation: 'programming' } };
    if (req.params.task)
      return asTask(req.method, req.params.task.ttl, extra, {
        action: 'accept',
        content: { name: 'Ada', favoriteColor: 'Blue' },
      });
    return { action: 'decline' };
  });
  o.client.setRequestHandler(ListRootsRequestSchema, async () => {
    o.rootsAsked++;
    return { roots: ROOTS };
  });
  o.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    o.logs.push({ level: n.params.level, data: n.params.data });
  });
  o.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    o.updates.push(n.params.uri);
  });
  const transport =
    mode === 'sse'
      ? new SSEClientTransport(new URL(url), { requestInit: { headers } })
      : new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  await o.client.connect(transport);
  return o;
}

/** A result without the gateway's receipt (and without an _meta left empty by removing it). */
function withoutReceipt<T>(result: T): T {
  const r = result as Record<string, unknown>;
  const meta = r._meta as Record<string, unknown> | undefined;
  if (!meta || !('veto_receipt' in meta)) return result;
  const { veto_receipt: _, ...rest } = meta;
  const { _meta: __, ...body } = r;
  return (Object.keys(rest).length > 0 ? { ...body, _meta: rest } : body) as T;
}

/** Dynamic resources carry the time they were made (to the second): masked, so two reads compare. */
const timeless = (v: unknown) => JSON.parse(JSON.stringify(v).replace(/created at [^"\\]*/g, 'created at T'));

/** Task and elicitation ids are random per run: masked, so two runs compare. */
const idless = (v: unknown) =>
  JSON.parse(
    JSON.stringify(v)
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, 'ID')
      .replace(/\b[0-9a-f]{32}\b/gi, 'ID'),
  );

/** A rejected call's JSON-RPC error as the client saw it (a call that succeeds fails the test). */
async function failure(
  p: Promise<unknown>,
): Promise<{ code?: number; message?: string; data: Record<string, unknown> }> {
  const err = await p.then(
    () => null,
    (e: { code?: number; message?: string; data?: unknown }) => e,
  );
  if (!err) throw new Error('expected a JSON-RPC error');
  return { code: err.code, message: err.message, data: (err.data ?? {}) as Record<string, unknown> };
}

async function until(check: () => boolean, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const byName = <T extends { name: string }>(xs: T[]) => [...xs].sort((a, b) => a.name.localeCompare(b.name));

describe.each(['streamableHttp', 'sse'] as const)(
  'server-everything (%s) directly and through the gateway',
  (mode) => {
    let everything: Everything;
    let tenant: Tenant;
    let gatewayUrl: string;
    const open: Client[] = [];

    const t = useTestApp({}, { listen: true });
    beforeAll(async () => {
      everything = await startEverything(mode);
      tenant = await createTenant(t);
      const slug = `everything-${mode.toLowerCase()}`;
      await createUpstream(t, tenant, {
        name: slug,
        slug,
        url: everything.url,
        transport: mode === 'sse' ? 'mcp-sse' : 'mcp-streamable-http',
        timeoutMs: 10_000,
      });
      gatewayUrl = `${t.url}/v1/mcp/${slug}`;
    });
    afterAll(async () => {
      await Promise.all(open.map((c) => c.close().catch(() => {})));
      await everything.stop();
    });

    async function both(): Promise<[Observed, Observed]> {
      const direct = await connectClient(everything.url, mode, {});
      const gated = await connectClient(gatewayUrl, 'gateway', { 'x-service-api-key': tenant.apiKey });
      open.push(direct.client, gated.client);
      return [direct, gated];
    }

    it('hands over the same server identity, capabilities, instructions and lists', async () => {
      const [d, g] = await both();
      expect(g.client.getServerVersion()).toEqual(d.client.getServerVersion());
      expect(g.client.getServerCapabilities()).toEqual(d.client.getServerCapabilities());
      expect(g.client.getInstructions()).toEqual(d.client.getInstructions());
      // Conditional tools (sampling, elicitation, roots) are there: the client's capabilities went upstream.
      const tools = byName((await d.client.listTools()).tools);
      expect(tools.map((x) => x.name)).toEqual(
        expect.arrayContaining(['trigger-sampling-request', 'trigger-elicitation-request', 'get-roots-list']),
      );
      expect(byName((await g.client.listTools()).tools)).toEqual(tools);
      expect(await g.client.listResources()).toEqual(await d.client.listResources());
      expect(await g.client.listResourceTemplates()).toEqual(await d.client.listResourceTemplates());
      expect(await g.client.listPrompts()).toEqual(await d.client.listPrompts());
      expect(await g.client.ping()).toEqual(await d.client.ping());
    });

    it('reads resources, gets prompts and completes arguments identically', async () => {
      const [d, g] = await both();
      const { resources } = await d.client.listResources();
      for (const r of resources.slice(0, 4)) {
        expect(timeless(await g.client.readResource({ uri: r.uri })), r.uri).toEqual(
          timeless(await d.client.readResource({ uri: r.uri })),
        );
      }
      const templated = 'demo://resource/dynamic/text/3';
      expect(timeless(await g.client.readResource({ uri: templated }))).toEqual(
        timeless(await d.client.readResource({ uri: templated })),
      );
      const prompts: [string, Record<string, string> | undefined][] = [
        ['simple-prompt', undefined],
        ['args-prompt', { city: 'Lyon', state: 'Rhône' }],
        ['completable-prompt', { department: 'Engineering', name: 'Ada' }],
        ['resource-prompt', { resourceType: 'Text', resourceId: '2' }],
      ];
      for (const [name, args] of prompts) {
        const p = { name, ...(args ? { arguments: args } : {}) };
        // resource-prompt embeds a dynamic resource stamped with the second it was made.
        expect(timeless(await g.client.getPrompt(p)), name).toEqual(timeless(await d.client.getPrompt(p)));
      }
      const complete = {
        ref: { type: 'ref/prompt' as const, name: 'completable-prompt' },
        argument: { name: 'department', value: 'E' },
      };
      const direct = await d.client.complete(complete);
      expect(direct.completion.values.length).toBeGreaterThan(0);
      expect(await g.client.complete(complete)).toEqual(direct);
      // An upstream JSON-RPC error comes back with the upstream's code and message.
      const missing = { uri: 'demo://no/such/resource' };
      const de = await d.client.readResource(missing).then(
        () => null,
        (e: { code: number; message: string }) => e,
      );
      const ge = await g.client.readResource(missing).then(
        () => null,
        (e: { code: number; message: string }) => e,
      );
      expect(de).not.toBeNull();
      expect({ code: ge?.code, message: ge?.message }).toEqual({ code: de?.code, message: de?.message });
    });

    it('calls the plain tools with the same results, plus a receipt through the gateway', async () => {
      const [d, g] = await both();
      const calls: [string, Record<string, unknown>][] = [
        ['echo', { message: 'hello everything' }],
        ['get-sum', { a: 2, b: 40 }],
        ['get-tiny-image', {}],
        ['get-annotated-message', { messageType: 'error', includeImage: true }],
        ['get-structured-content', { location: 'New York' }],
        ['get-resource-links', { count: 3 }],
        ['get-resource-reference', { resourceType: 'Text', resourceId: 2 }],
        // The server's own environment: one process serves both paths, so it must read the same.
        ['get-env', {}],
        [
          'gzip-file-as-resource',
          { name: 'compat.txt.gz', data: 'data:text/plain;base64,aGVsbG8gZ2F0ZXdheQ==' },
        ],
      ];
      for (const [name, args] of calls) {
        const direct = await d.client.callTool({ name, arguments: args });
        const gated = await g.client.callTool({ name, arguments: args });
        expect((gated._meta as Record<string, unknown>).veto_receipt, name).toMatchObject({
          receipt_hash: expect.stringMatching(/^sha256:/),
        });
        expect(timeless(withoutReceipt(gated)), name).toEqual(timeless(direct));
      }
    });

    it('relays sampling, elicitation and roots requests to the client and its answers back', async () => {
      const [d, g] = await both();
      const sampling = { name: 'trigger-sampling-request', arguments: { prompt: 'tell me', maxTokens: 20 } };
      const ds = await d.client.callTool(sampling);
      const gs = await g.client.callTool(sampling);
      expect(withoutReceipt(gs)).toEqual(ds);
      expect(JSON.stringify(gs.content)).toContain('sampled: ');
      expect(g.sampled).toEqual(d.sampled);

      const elicit = { name: 'trigger-elicitation-request', arguments: {} };
      expect(withoutReceipt(await g.client.callTool(elicit))).toEqual(await d.client.callTool(elicit));
      expect(g.elicited).toBe(1);

      const roots = { name: 'get-roots-list', arguments: {} };
      const gr = await g.client.callTool(roots);
      expect(withoutReceipt(gr)).toEqual(await d.client.callTool(roots));
      expect(JSON.stringify(gr.content)).toContain(ROOTS[0]!.uri);
      expect(g.rootsAsked).toBeGreaterThan(0);
    });

    it('relays URL-mode elicitation, by request and by the -32042 error, with its data unchanged', async () => {
      const [d, g] = await both();
      const call = {
        name: 'trigger-url-elicitation',
        arguments: { url: 'https://example.com/consent', elicitationId: 'compat-elicitation' },
      };
      const direct = await d.client.callTool(call);
      const gated = await g.client.callTool(call);
      expect(withoutReceipt(gated)).toEqual(direct);
      expect(g.urlElicited).toEqual(d.urlElicited);
      expect(g.urlElicited).toEqual([
        { url: 'https://example.com/consent', elicitationId: 'compat-elicitation' },
      ]);

      // The error path: the client needs the prerequisite elicitations in error.data, as the server sent them.
      const errorPath = { name: call.name, arguments: { url: 'https://example.com/pre', errorPath: true } };
      const de = await failure(d.client.callTool(errorPath));
      const ge = await failure(g.client.callTool(errorPath));
      expect(de.code).toBe(-32042);
      // (The SDK rebuilds a -32042 from its elicitations alone: the receipt the gateway adds under
      // data._meta is not kept; other errors keep it, see gateway.test.ts.)
      const {
        veto_receipt: _r,
        veto_decision: _d,
        ...meta
      } = (ge.data._meta as Record<string, unknown> | undefined) ?? {};
      const data = { ...ge.data, _meta: meta };
      if (Object.keys(meta).length === 0) delete (data as { _meta?: unknown })._meta;
      expect(idless({ ...ge, data })).toEqual(idless(de));
      // Retried once the prerequisite is met, the same call goes through (a receipt for each attempt).
      const retried = await g.client.callTool(errorPath);
      expect(idless(withoutReceipt(retried))).toEqual(idless(await d.client.callTool(errorPath)));

      // On the wire the error keeps the upstream's data whole; the receipt is added under data._meta.
      const headers = { 'x-service-api-key': tenant.apiKey };
      const init = await rawRpc(
        gatewayUrl,
        {
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: {
            protocolVersion: LATEST_PROTOCOL_VERSION,
            capabilities: { elicitation: { url: {} } },
            clientInfo: { name: 'raw', version: '1' },
          },
        },
        headers,
      );
      const session = { ...headers, 'mcp-session-id': init.headers.get('mcp-session-id')! };
      await rawRpc(gatewayUrl, { jsonrpc: '2.0', method: 'notifications/initialized' }, session);
      const raw = await rawRpc(
        gatewayUrl,
        { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { ...errorPath } },
        { ...session, accept: 'application/json' },
      );
      const { error } = raw.json() as { error: { code: number; data: Record<string, unknown> } };
      expect(error.code).toBe(-32042);
      expect(idless(error.data.elicitations)).toEqual(idless(de.data.elicitations));
      expect(error.data._meta).toEqual({
        veto_receipt: expect.objectContaining({ receipt_hash: expect.stringMatching(/^sha256:/) }),
        veto_decision: {
          tool: 'trigger-url-elicitation',
          decisionId: expect.any(String),
          reason: expect.stringMatching(/upstream answered error -32042/),
        },
      });
    });

    it('runs a task-based tool: tools/call with a task, tasks/get, the input_required elicitation, tasks/result', async () => {
      const [d, g] = await both();
      const tools = (await g.client.listTools()).tools;
      expect(tools.find((x) => x.name === 'simulate-research-query')?.execution).toEqual({
        taskSupport: 'required',
      });
      const run = async (o: Observed) => {
        const seen: { type: string; status?: string; meta?: unknown }[] = [];
        let final: unknown;
        const stream = o.client.experimental.tasks.callToolStream(
          { name: 'simulate-research-query', arguments: { topic: 'python', ambiguous: true } },
          CallToolResultSchema,
          { task: { ttl: 60_000 } },
        );
        for await (const m of stream) {
          if (m.type === 'taskCreated') seen.push({ type: m.type, status: m.task.status });
          else if (m.type === 'taskStatus') seen.push({ type: m.type, status: m.task.status });
          else if (m.type === 'result') final = m.result;
          else throw m.error;
        }
        return { seen, final };
      };
      const [dr, gr] = await Promise.all([run(d), run(g)]);
      expect(idless(gr.final)).toEqual(idless(dr.final));
      expect(JSON.stringify(gr.final)).toContain('Research Report: python (programming)');
      // Polling sees as many intermediate statuses as its timing allows; the milestones are the same.
      const milestones = (s: { type: string; status?: string }[]) => [
        s[0],
        ...new Set(s.slice(1).map((x) => x.status)),
      ];
      expect(milestones(gr.seen)).toEqual(milestones(dr.seen));
      expect(gr.seen.map((x) => x.status)).toContain('input_required');
      expect(g.elicited).toBe(1);
      expect(d.elicited).toBe(1);

      // tasks/list and tasks/get on the session's own tasks, tasks/cancel on a fresh one.
      const listed = async (o: Observed) =>
        (await o.client.experimental.tasks.listTasks()).tasks.map((x) => ({ status: x.status, ttl: x.ttl }));
      expect(await listed(g)).toEqual(await listed(d));
      const started = async (o: Observed) => {
        const stream = o.client.experimental.tasks.callToolStream(
          { name: 'simulate-research-query', arguments: { topic: 'rust' } },
          CallToolResultSchema,
          { task: { ttl: 60_000 } },
        );
        const first = await stream.next();
        if (first.value?.type !== 'taskCreated') throw new Error('no task created');
        await stream.return(undefined);
        return first.value.task.taskId;
      };
      const [dt, gt] = await Promise.all([started(d), started(g)]);
      const shape = (x: Record<string, unknown>) => ({
        taskId: typeof x.taskId,
        status: x.status,
        ttl: x.ttl,
      });
      expect(shape(await g.client.experimental.tasks.getTask(gt))).toEqual(
        shape(await d.client.experimental.tasks.getTask(dt)),
      );
      const [dc, gc] = [
        await d.client.experimental.tasks.cancelTask(dt),
        await g.client.experimental.tasks.cancelTask(gt),
      ];
      expect(shape(gc)).toEqual(shape(dc));
      expect(gc.status).toBe('cancelled');
      // Another session's task is not reachable: the gateway session has its own upstream session.
      expect(await failure(g.client.experimental.tasks.getTask(dt))).toEqual(
        await failure(d.client.experimental.tasks.getTask(gt)),
      );
    });

    it('relays task-augmented sampling and elicitation the server runs as client tasks (tasks/* both ways)', async () => {
      const [d, g] = await both();
      const calls = [
        { name: 'trigger-sampling-request-async', arguments: { prompt: 'in the background', maxTokens: 20 } },
        { name: 'trigger-elicitation-request-async', arguments: {} },
      ];
      for (const call of calls) {
        const [dr, gr] = await Promise.all([d.client.callTool(call), g.client.callTool(call)]);
        expect(idless(withoutReceipt(gr)), call.name).toEqual(idless(dr));
        expect(JSON.stringify(gr.content), call.name).toContain('[COMPLETED]');
      }
      expect(g.clientTasks).toEqual(['sampling/createMessage', 'elicitation/create']);
      expect(g.clientTasks).toEqual(d.clientTasks);
    });

    it("relays progress notifications with the client's own progress token", async () => {
      const [d, g] = await both();
      const seen: Record<string, { progress: number; total?: number }[]> = { d: [], g: [] };
      const call = { name: 'trigger-long-running-operation', arguments: { duration: 0.4, steps: 4 } };
      const dr = await d.client.callTool(call, undefined, { onprogress: (p) => seen.d!.push(p) });
      const gr = await g.client.callTool(call, undefined, { onprogress: (p) => seen.g!.push(p) });
      expect(withoutReceipt(gr)).toEqual(dr);
      // Over the SSE transport the last notification can race the result even directly: the SDK
      // client drops progress that arrives after the response. So: at least 3 of 4, in order, both ways.
      for (const path of ['d', 'g']) {
        const got = seen[path]!;
        expect(got.length, path).toBeGreaterThanOrEqual(mode === 'sse' ? 3 : 4);
        expect(got, path).toEqual(got.map((_, i) => ({ progress: i + 1, total: 4 })));
      }
    });

    it('passes logging/setLevel and resource subscriptions through, and relays their notifications', async () => {
      const [d, g] = await both();
      for (const o of [d, g]) {
        await o.client.setLoggingLevel('debug');
        await o.client.subscribeResource({ uri: 'demo://resource/static/document/architecture.md' });
        await o.client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
        await o.client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
      }
      for (const [o, path] of [
        [d, 'direct'],
        [g, 'gateway'],
      ] as const) {
        await until(() => o.updates.length > 0, `resources/updated (${path})`);
        await until(
          () => o.logs.some((l) => String(l.data).includes('-level message')),
          `a log message (${path})`,
        );
      }
      expect(g.updates[0]).toBe(d.updates[0]);
      // The subscribe request itself was logged by the upstream, in this client's session only.
      expect(g.logs.some((l) => String(l.data).includes('Received Subscribe Resource request'))).toBe(true);
      for (const o of [d, g]) {
        await o.client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
        await o.client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
        await o.client.unsubscribeResource({ uri: 'demo://resource/static/document/architecture.md' });
      }
    });
  },
);
