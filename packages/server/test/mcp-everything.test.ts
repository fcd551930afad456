import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, createTestApp, type Tenant, type TestApp } from './helpers.js';
import { type Everything, type EverythingMode, startEverything } from './mcp-everything.js';
import { createUpstream } from './mcp-helpers.js';

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
  rootsAsked: number;
}

const ROOTS = [{ uri: 'file:///tmp/compat-root', name: 'compat root' }];

async function connectClient(url: string, mode: EverythingMode | 'gateway', headers: Record<string, string>) {
  const o: Observed = {
    client: new Client(
      { name: 'compat-client', version: '1.0.0' },
      { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
    ),
    logs: [],
    updates: [],
    sampled: [],
    elicited: 0,
    rootsAsked: 0,
  };
  o.client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    const first = req.params.messages[0]?.content;
    const text = first && 'text' in first ? String(first.text) : '';
    o.sampled.push(text);
    return { model: 'compat-model', role: 'assistant', content: { type: 'text', text: `sampled: ${text}` } };
  });
  o.client.setRequestHandler(ElicitRequestSchema, async () => {
    o.elicited++;
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

async function until(check: () => boolean, what: string, ms = 8000): Promise<void> {
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
    let t: TestApp;
    let everything: Everything;
    let tenant: Tenant;
    let gatewayUrl: string;
    const open: Client[] = [];

    beforeAll(async () => {
      everything = await startEverything(mode);
      t = await createTestApp();
      const base = await t.app.listen({ port: 0, host: '127.0.0.1' });
      tenant = await createTenant(t);
      const slug = `everything-${mode.toLowerCase()}`;
      await createUpstream(t, tenant, {
        name: slug,
        slug,
        url: everything.url,
        transport: mode === 'sse' ? 'mcp-sse' : 'mcp-streamable-http',
        timeoutMs: 10_000,
      });
      gatewayUrl = `${base}/v1/mcp/${slug}`;
    });
    afterAll(async () => {
      await Promise.all(open.map((c) => c.close().catch(() => {})));
      await t.close();
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
      ];
      for (const [name, args] of prompts) {
        const p = { name, ...(args ? { arguments: args } : {}) };
        expect(await g.client.getPrompt(p), name).toEqual(await d.client.getPrompt(p));
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
