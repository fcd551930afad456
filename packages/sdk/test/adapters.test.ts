import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type Client, DeniedError } from '@svc/sdk';
import { guardTool, guardTools } from '@svc/sdk/ai';
import { guardMcpClient } from '@svc/sdk/mcp';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type McpUpstream, startMcpUpstream } from '../../server/test/mcp-upstream.js';
import { usePayTenant } from './live.js';

let client: Client;
const pay = usePayTenant();
const { approveWhenAsked } = pay;
beforeAll(() => {
  client = pay.client;
});

describe('Vercel AI SDK tool()', () => {
  const paid: number[] = [];
  const pay = tool({
    description: 'Pays an amount',
    inputSchema: z.object({ amount: z.number() }),
    execute: async ({ amount }) => {
      paid.push(amount);
      return { paid: amount };
    },
  });

  /** A model that asks for one `pay` call, then answers with text. */
  const modelCalling = (amount: number) => {
    let step = 0;
    return new MockLanguageModelV3({
      doGenerate: async () => {
        step++;
        const usage = {
          inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
          outputTokens: { total: 1, text: 1, reasoning: 0 },
        };
        if (step === 1) {
          return {
            content: [
              {
                type: 'tool-call',
                toolCallId: `call-${amount}`,
                toolName: 'pay',
                input: JSON.stringify({ amount }),
              },
            ],
            finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
            usage,
            warnings: [],
          };
        }
        return {
          content: [{ type: 'text', text: 'done' }],
          finishReason: { unified: 'stop', raw: 'stop' },
          usage,
          warnings: [],
        };
      },
    });
  };

  it('runs an allowed call through generateText', async () => {
    const result = await generateText({
      model: modelCalling(20),
      tools: guardTools(client, { pay }),
      prompt: 'pay 20',
      stopWhen: stepCountIs(3),
    });
    const toolResults = result.steps.flatMap((s) => s.toolResults);
    expect(toolResults.map((r) => r.output)).toEqual([{ paid: 20 }]);
    expect(paid).toContain(20);
  });

  it('reports a denied call to the model as a tool error and never executes it', async () => {
    const result = await generateText({
      model: modelCalling(500),
      tools: { pay: guardTool(client, 'pay', pay) },
      prompt: 'pay 500',
      stopWhen: stepCountIs(3),
    });
    const errors = result.steps.flatMap((s) => s.content).filter((c) => c.type === 'tool-error');
    expect(errors).toHaveLength(1);
    expect((errors[0] as { error: unknown }).error).toBeInstanceOf(DeniedError);
    expect(paid).not.toContain(500);
  });

  it('waits for a person, then executes', async () => {
    const approved = approveWhenAsked();
    const result = await generateText({
      model: modelCalling(70),
      tools: guardTools(client, { pay }),
      prompt: 'pay 70',
      stopWhen: stepCountIs(3),
    });
    await approved;
    expect(result.steps.flatMap((s) => s.toolResults).map((r) => r.output)).toEqual([{ paid: 70 }]);
  });
});

describe('streaming Vercel AI SDK tools', () => {
  /** A model that asks for one `pay` call, then answers with text. */
  const modelCalling = (amount: number) => {
    let step = 0;
    const usage = {
      inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 1, text: 1, reasoning: 0 },
    };
    return new MockLanguageModelV3({
      doGenerate: async () =>
        ++step === 1
          ? {
              content: [
                {
                  type: 'tool-call',
                  toolCallId: `s-${amount}`,
                  toolName: 'pay',
                  input: JSON.stringify({ amount }),
                },
              ],
              finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
              usage,
              warnings: [],
            }
          : {
              content: [{ type: 'text', text: 'done' }],
              finishReason: { unified: 'stop', raw: 'stop' },
              usage,
              warnings: [],
            },
    });
  };
  const options = { toolCallId: 'c1', messages: [] };

  it('checks an async function* tool before its first chunk, then streams its chunks', async () => {
    const chunks: number[] = [];
    const pay = tool({
      description: 'Pays in steps',
      inputSchema: z.object({ amount: z.number() }),
      async *execute({ amount }) {
        for (let i = 1; i <= 3; i++) {
          chunks.push(i);
          yield { step: i, amount };
        }
      },
    });
    const guarded = guardTool(client, 'pay', pay);
    // Still a stream the AI SDK recognizes at once (it looks for an async iterable, not a promise).
    const stream = guarded.execute!({ amount: 20 }, options) as AsyncIterable<unknown>;
    expect(typeof stream[Symbol.asyncIterator]).toBe('function');
    const seen: unknown[] = [];
    for await (const chunk of stream) seen.push(chunk);
    expect(seen).toEqual([
      { step: 1, amount: 20 },
      { step: 2, amount: 20 },
      { step: 3, amount: 20 },
    ]);
    // Denied: not one chunk is produced.
    const denied = guarded.execute!({ amount: 500 }, options) as AsyncIterable<unknown>;
    const error = await (async () => {
      for await (const _ of denied) throw new Error('a chunk of a denied call');
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeniedError);
    expect(chunks).toEqual([1, 2, 3]);

    // Through generateText the result is the last chunk, as without the guard.
    const result = await generateText({
      model: modelCalling(30),
      tools: guardTools(client, { pay }),
      prompt: 'pay 30',
      stopWhen: stepCountIs(3),
    });
    expect(result.steps.flatMap((s) => s.toolResults).map((r) => r.output)).toEqual([
      { step: 3, amount: 30 },
    ]);
  });

  it('answers the last chunk of an execute that returns an async iterable', async () => {
    async function* steps(amount: number) {
      yield { step: 1, amount };
      yield { step: 2, amount };
    }
    const pay = tool({
      description: 'Pays in steps',
      inputSchema: z.object({ amount: z.number() }),
      execute: ({ amount }) => steps(amount),
    });
    const result = await generateText({
      model: modelCalling(40),
      tools: guardTools(client, { pay }),
      prompt: 'pay 40',
      stopWhen: stepCountIs(3),
    });
    expect(result.steps.flatMap((s) => s.toolResults).map((r) => r.output)).toEqual([
      { step: 2, amount: 40 },
    ]);
  });
});

describe('MCP client callTool', () => {
  let upstream: McpUpstream;
  let mcp: McpClient;
  beforeAll(async () => {
    upstream = await startMcpUpstream({ transport: 'streamable' });
    mcp = new McpClient({ name: 'agent', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(upstream.url)));
  });
  afterAll(async () => {
    await mcp.close();
    await upstream.close();
  });

  it('forwards allowed calls, refuses denied ones before they reach the server, waits for approvals', async () => {
    const guarded = guardMcpClient(client, mcp);
    const ok = await guarded.callTool({ name: 'pay', arguments: { amount: 10 } });
    expect(ok.structuredContent).toEqual({ paid: 10 });
    expect(upstream.calls.pay).toBe(1);

    await expect(guarded.callTool({ name: 'pay', arguments: { amount: 1000 } })).rejects.toBeInstanceOf(
      DeniedError,
    );
    expect(upstream.calls.pay).toBe(1);

    const approved = approveWhenAsked();
    const later = await guarded.callTool({ name: 'pay', arguments: { amount: 60 } });
    await approved;
    expect(later.structuredContent).toEqual({ paid: 60 });
    expect(upstream.calls.pay).toBe(2);
    // The rest of the client is untouched.
    expect((await guarded.listTools()).tools.map((x) => x.name)).toContain('pay');
  });
});
