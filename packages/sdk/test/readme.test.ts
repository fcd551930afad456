import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as lcTools from '@langchain/core/tools';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import * as agents from '@openai/agents';
import * as sdk from '@svc/sdk';
import * as sdkAi from '@svc/sdk/ai';
import * as sdkCapsules from '@svc/sdk/capsules';
import * as sdkLangchain from '@svc/sdk/langchain';
import * as sdkMcp from '@svc/sdk/mcp';
import * as sdkAgents from '@svc/sdk/openai-agents';
import * as sdkVerify from '@svc/sdk/verify';
import * as ai from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as zod from 'zod';
import { resolveApproval, setTier } from '../../server/test/approvals.js';
import { useTestApp } from '../../server/test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant } from '../../server/test/helpers.js';
import { putPolicy } from './live.js';
import {
  extractSnippets,
  importsOf,
  REPO_ROOT,
  type RunOptions,
  type RunResult,
  runSnippet,
  type Snippet,
  topLevelNames,
  typeCheck,
} from './readme-snippets.js';

/**
 * The code examples of the SDK's README (and any TypeScript or JavaScript example of the root
 * README): all type-checked in one program against the SDK as a user's project imports it (through
 * the package's `exports`), and the main ones run as written against a listening test service,
 * checking what their comments claim. How examples are read, and what `<!-- fragment -->` does:
 * readme-snippets.ts.
 */

const READMES = ['packages/sdk/README.md', 'README.md'];
const snippets = READMES.flatMap((file) =>
  extractSnippets(readFileSync(join(REPO_ROOT, file), 'utf8'), file),
);
const whole = snippets.filter((s) => !s.fragment);

/**
 * The one example of the SDK's README for `subpath`: the one importing it, or for `@svc/sdk`, the one
 * importing nothing else of the SDK.
 */
function exampleFor(subpath: string): Snippet {
  const found = whole.filter((s) => {
    if (s.file !== 'packages/sdk/README.md') return false;
    const ours = importsOf(s.code).filter((i) => i.startsWith('@svc/sdk'));
    return subpath === '@svc/sdk'
      ? ours.every((i) => i === subpath) && ours.length > 0
      : ours.includes(subpath);
  });
  if (found.length !== 1)
    throw new Error(`expected one README example for ${subpath}, found ${found.length}`);
  return found[0] as Snippet;
}

describe('README examples: reading them', () => {
  it('finds the examples and only the marked fragments', () => {
    expect(whole.filter((s) => s.file === 'packages/sdk/README.md').length).toBeGreaterThanOrEqual(7);
    // Fragments are neither compiled nor run: keep them the exception.
    expect(snippets.filter((s) => s.fragment).length).toBeLessThanOrEqual(2);
  });

  it('takes ts/typescript/js fences, skips others and honours the fragment mark', () => {
    const md = [
      '```sh',
      '```ts',
      '```',
      '',
      '```typescript',
      'const a = 1;',
      '```',
      '<!-- fragment -->',
      '',
      '```js',
      'b();',
      '```',
      '```json',
      '{}',
      '```',
    ].join('\n');
    expect(extractSnippets(md, 'x.md')).toEqual([
      { file: 'x.md', line: 5, lang: 'ts', code: 'const a = 1;\n', fragment: false },
      { file: 'x.md', line: 10, lang: 'js', code: 'b();\n', fragment: true },
    ]);
    expect(topLevelNames("import { x } from 'y';\nconst { a, b: [c] } = x;\nfunction f() {}\n")).toEqual([
      'a',
      'c',
      'f',
    ]);
  });

  it('names only subpaths the package exports', () => {
    const exported = Object.keys(
      JSON.parse(readFileSync(join(REPO_ROOT, 'packages/sdk/package.json'), 'utf8')).exports,
    ).map((p) => `@svc/sdk${p.slice(1)}`);
    for (const file of READMES) {
      const text = readFileSync(join(REPO_ROOT, file), 'utf8');
      for (const [, name] of text.matchAll(/[`'"](@svc\/sdk(?:\/[\w-]+)*)[`'"]/g)) {
        expect(exported, `${file} names ${name}`).toContain(name);
      }
    }
  });
});

describe('README examples: type-check', () => {
  it('compiles every example in a strict ESM project', () => {
    expect(typeCheck(whole)).toEqual([]);
  });
});

describe('README examples: run against a local service', () => {
  const t = useTestApp({}, { listen: true });
  let tenant: Tenant;
  /** Every client an example created, closed after it if the example did not. */
  const clients: sdk.Client[] = [];

  const modules: RunOptions['modules'] = {
    '@svc/sdk': {
      ...sdk,
      createClient: (options: sdk.ClientOptions) => {
        const client = sdk.createClient(options);
        clients.push(client);
        return client;
      },
    },
    '@svc/sdk/ai': sdkAi,
    '@svc/sdk/mcp': sdkMcp,
    '@svc/sdk/openai-agents': sdkAgents,
    '@svc/sdk/langchain': sdkLangchain,
    '@svc/sdk/verify': sdkVerify,
    '@svc/sdk/capsules': sdkCapsules,
    ai,
    zod,
    '@openai/agents': agents,
    '@langchain/core/tools': lcTools,
  };

  /**
   * Runs an example, then `inspect` on what it left (before its clients are closed, for objects that
   * use them), then closes the clients it did not close itself.
   */
  async function run(
    snippet: Snippet,
    values: Record<string, unknown> = {},
    inspect?: (result: RunResult) => Promise<void>,
  ) {
    try {
      const result = await runSnippet(snippet, { baseUrl: t.url, apiKey: tenant.apiKey, modules, values });
      await inspect?.(result);
      return result;
    } finally {
      await Promise.all(clients.splice(0).map((c) => c.close()));
    }
  }

  /** `pay` denied above 10, or (`require_approval`) a person is asked above 10. */
  const payAbove10 = (action: 'deny' | 'require_approval') =>
    putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 10, action }],
    });

  /** A spy standing for the reader's tool implementation (`pay` of the examples). */
  function paySpy() {
    const calls: unknown[] = [];
    const pay = async (args: { amount: number }) => {
      calls.push(args);
      return `paid ${args.amount}`;
    };
    return { pay, calls };
  }

  async function decisions(decision: string): Promise<number> {
    const res = await t.inject({
      method: 'GET',
      url: `/v1/decisions?toolName=pay&decision=${decision}`,
      headers: keyHeader(tenant.apiKey),
    });
    return res.json().pagination.total;
  }

  beforeAll(async () => {
    tenant = await createTenant(t);
    await setTier(t, tenant, 'team');
  });

  afterAll(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });

  describe('plain async function (client.wrap)', () => {
    const example = () => exampleFor('@svc/sdk');
    const bankSpy = () => {
      const calls: unknown[] = [];
      return { calls, bank: { pay: async (args: unknown) => calls.push(args) } };
    };

    it('runs on allow, and close() records the local decision', async () => {
      await putPolicy(t, tenant, 'pay', {
        mode: 'deterministic',
        constraints: [{ argumentName: 'amount', maximum: 100 }],
      });
      const before = await decisions('allow');
      const { bank, calls } = bankSpy();
      await run(example(), { bank });
      expect(calls).toEqual([{ amount: 20, to: 'acct_1' }]);
      // The example's own close() resolved: the decision is in the log already.
      expect(await decisions('allow')).toBe(before + 1);
    });

    it('throws DeniedError on deny, without running the function', async () => {
      await payAbove10('deny');
      const { bank, calls } = bankSpy();
      await expect(run(example(), { bank })).rejects.toBeInstanceOf(sdk.DeniedError);
      expect(calls).toEqual([]);
    });

    it('waits for a person on require_approval, then runs', async () => {
      await payAbove10('require_approval');
      const { bank, calls } = bankSpy();
      const ran = run(example(), { bank });
      let id: string | undefined;
      for (let i = 0; i < 250 && !id; i++) {
        const list = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(tenant) });
        id = list.json().data[0]?.id;
        if (!id) await new Promise((r) => setTimeout(r, 20));
      }
      expect(id, 'the example asked for no approval').toBeDefined();
      expect(calls).toEqual([]);
      await resolveApproval(t, tenant, id as string, 'approve');
      await ran;
      expect(calls).toEqual([{ amount: 20, to: 'acct_1' }]);
    });
  });

  it('Vercel AI SDK: a denial reaches the model as a tool error', async () => {
    await payAbove10('deny');
    const { pay, calls } = paySpy();
    const usage = {
      inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 1, text: 1, reasoning: 0 },
    };
    let step = 0;
    const model = new MockLanguageModelV3({
      doGenerate: async () =>
        ++step === 1
          ? {
              content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'pay', input: '{"amount":20}' }],
              finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
              usage,
              warnings: [],
            }
          : {
              content: [{ type: 'text', text: 'I may not pay that.' }],
              finishReason: { unified: 'stop', raw: 'stop' },
              usage,
              warnings: [],
            },
    });
    const { bindings } = await run(exampleFor('@svc/sdk/ai'), { pay, model, prompt: 'Pay 20' });
    expect(calls).toEqual([]);
    const result = bindings['result'] as Awaited<ReturnType<typeof ai.generateText>>;
    const errors = result.steps.flatMap((s) => s.content).filter((c) => c.type === 'tool-error');
    expect(errors.map((e) => (e as { error: unknown }).error)).toEqual([expect.any(sdk.DeniedError)]);
    // The model was asked again, with the denial as the tool's result.
    expect(model.doGenerateCalls).toHaveLength(2);
    const toolMessage = model.doGenerateCalls[1]?.prompt.find((m) => m.role === 'tool');
    expect(JSON.stringify(toolMessage?.content)).toMatch(/"type":"error-(text|json)".*denied/);
    expect(result.text).toBe('I may not pay that.');
  });

  it('MCP client: callTool throws DeniedError and the server is never called', async () => {
    await payAbove10('deny');
    const served: unknown[] = [];
    const server = new McpServer({ name: 'bank', version: '1.0.0' });
    server.registerTool('pay', { inputSchema: { amount: zod.z.number() } }, async (args) => {
      served.push(args);
      return { content: [{ type: 'text', text: 'paid' }] };
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const connectedMcpClient = new McpClient({ name: 'agent', version: '1.0.0' });
    await connectedMcpClient.connect(clientSide);
    try {
      await expect(run(exampleFor('@svc/sdk/mcp'), { connectedMcpClient })).rejects.toBeInstanceOf(
        sdk.DeniedError,
      );
      expect(served).toEqual([]);
      // The server does answer the same call unguarded: the denial is the guard's.
      await connectedMcpClient.callTool({ name: 'pay', arguments: { amount: 20 } });
      expect(served).toEqual([{ amount: 20 }]);
    } finally {
      await connectedMcpClient.close();
      await server.close();
    }
  });

  it("OpenAI Agents SDK: a denial is the tool's answer to the model", async () => {
    await payAbove10('deny');
    const { pay, calls } = paySpy();
    await run(exampleFor('@svc/sdk/openai-agents'), { pay }, async ({ bindings }) => {
      const payTool = bindings['payTool'] as agents.FunctionTool;
      expect((bindings['agent'] as agents.Agent).tools).toEqual([payTool]);
      // What the agent runner does with the model's function call: invoke the tool, hand its output back.
      const answer = await payTool.invoke(new agents.RunContext(), '{"amount":20}');
      expect(answer).toBe('Tool call "pay" denied: amount: must be at most 10 (got 20)');
    });
    expect(calls).toEqual([]);
  });

  it('LangChain.js: invoke throws DeniedError on deny', async () => {
    await payAbove10('deny');
    const { pay, calls } = paySpy();
    await expect(run(exampleFor('@svc/sdk/langchain'), { pay })).rejects.toBeInstanceOf(sdk.DeniedError);
    expect(calls).toEqual([]);
  });

  it('spend capsules: verifies a capsule the service minted', async () => {
    const pack = await t.inject({
      method: 'PUT',
      url: '/v1/gateway/packs/readme',
      headers: asUser(tenant),
      payload: { allowed_rails: ['ledger'], quarantine_seconds: 0 },
    });
    expect(pack.statusCode, pack.body).toBe(201);
    const minted = await t.inject({
      method: 'POST',
      url: '/v1/gateway/capsules',
      headers: keyHeader(tenant.apiKey),
      payload: {
        entity_id: 'acme-eu',
        agent_id: 'ap-agent',
        pack_id: 'readme',
        rails: ['ledger'],
        beneficiary: { details: { name: 'ACME Supplies', account_number: 'DE89 3704 0044 0532 0130 00' } },
        amount_ceiling: { currency: 'USD', amount: '120.00' },
        ttl_seconds: 300,
      },
    });
    expect(minted.statusCode, minted.body).toBe(201);
    const capsule = minted.json().capsule as string;
    const { bindings, logs } = await run(exampleFor('@svc/sdk/capsules'), { capsule });
    expect(bindings['check']).toMatchObject({ ok: true });
    expect(logs).toEqual([[{ currency: 'USD', amount: '120.00' }, expect.any(String)]]);
    expect((bindings['keys'] as unknown[]).length).toBeGreaterThan(0);
  });

  it('verifier: an exported receipt chain verifies', async () => {
    const { bindings } = await run(exampleFor('@svc/sdk/verify'), {
      baseUrl: t.url,
      key: tenant.apiKey,
    });
    const report = bindings['report'] as sdkVerify.VerifyReport;
    expect(report.errors).toEqual([]);
    expect(report.ok).toBe(true);
    // Every decision of the examples above has its receipt in the chain.
    expect(report.count).toBeGreaterThanOrEqual((await decisions('allow')) + (await decisions('deny')));
    expect(report.organizationId).toBe(tenant.orgId);
  });
});
