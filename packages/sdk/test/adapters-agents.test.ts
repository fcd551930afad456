import { tool as lcTool } from '@langchain/core/tools';
import { tool as agentsTool, RunContext } from '@openai/agents';
import { type Client, DeniedError } from '@svc/sdk';
import { guardLangChainTool } from '@svc/sdk/langchain';
import { guardFunctionTool } from '@svc/sdk/openai-agents';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { usePayTenant } from './live.js';

let client: Client;
const pay = usePayTenant();
const { approveWhenAsked } = pay;
beforeAll(() => {
  client = pay.client;
});

describe('OpenAI Agents SDK function tools', () => {
  const paid: number[] = [];
  const pay = agentsTool({
    name: 'pay',
    description: 'Pays an amount',
    parameters: z.object({ amount: z.number() }),
    execute: async ({ amount }) => {
      paid.push(amount);
      return `paid ${amount}`;
    },
  });

  it('invokes allowed calls, tells the model about denied ones without running them, waits for approvals', async () => {
    const guarded = guardFunctionTool(client, pay);
    expect(guarded.name).toBe('pay');
    expect(guarded.parameters).toEqual(pay.parameters);
    const ctx = new RunContext();
    expect(await guarded.invoke(ctx, JSON.stringify({ amount: 10 }))).toBe('paid 10');
    const denied = await guarded.invoke(ctx, JSON.stringify({ amount: 1000 }));
    expect(denied).toBe(
      'Tool call "pay" denied: amount: must be at most 100 (got 1000); amount: must be at most 50 (got 1000)',
    );
    expect(paid).toEqual([10]);
    const approved = approveWhenAsked();
    expect(await guarded.invoke(ctx, JSON.stringify({ amount: 70 }))).toBe('paid 70');
    await approved;
    expect(paid).toEqual([10, 70]);
  });

  it('throws DeniedError with throwOnDeny', async () => {
    await expect(
      guardFunctionTool(client, pay, { throwOnDeny: true }).invoke(
        new RunContext(),
        JSON.stringify({ amount: 1000 }),
      ),
    ).rejects.toBeInstanceOf(DeniedError);
    expect(paid).not.toContain(1000);
  });
});

describe('OpenAI Agents SDK: what the model is told of a refusal', () => {
  const execute = async ({ amount }: { amount: number }) => `paid ${amount}`;
  const refusal = JSON.stringify({ amount: 1000 });

  it('is the output of the errorFunction given to the guard (tool() keeps its own only with an outputSchema)', async () => {
    const pay = agentsTool({
      name: 'pay',
      description: 'Pays an amount',
      parameters: z.object({ amount: z.number() }),
      errorFunction: () => 'not on the tool object',
      execute,
    });
    const guarded = guardFunctionTool(client, pay, {
      errorFunction: (_ctx, err) => `refused: ${(err as DeniedError).reason}`,
    });
    expect(await guarded.invoke(new RunContext(), refusal)).toBe(
      'refused: amount: must be at most 100 (got 1000); amount: must be at most 50 (got 1000)',
    );
  });

  it('is the tool’s own errorFunction when the tool object carries one', async () => {
    const pay = agentsTool({
      name: 'pay',
      description: 'Pays an amount',
      parameters: z.object({ amount: z.number() }),
      outputSchema: z.object({ paid: z.number() }),
      errorFunction: () => ({ paid: 0 }),
      execute: async ({ amount }) => ({ paid: amount }),
    });
    expect(await guardFunctionTool(client, pay).invoke(new RunContext(), refusal)).toEqual({ paid: 0 });
  });
});

describe('LangChain.js tools', () => {
  it('runs allowed calls, throws DeniedError on denied ones, waits for approvals', async () => {
    const paid: number[] = [];
    const pay = lcTool(
      async ({ amount }: { amount: number }) => {
        paid.push(amount);
        return `paid ${amount}`;
      },
      { name: 'pay', description: 'Pays an amount', schema: z.object({ amount: z.number() }) },
    );
    const guarded = guardLangChainTool(client, pay);
    expect(guarded.name).toBe('pay');
    expect(guarded).toBeInstanceOf(pay.constructor);
    expect(await guarded.invoke({ amount: 10 })).toBe('paid 10');
    await expect(guarded.invoke({ amount: 1000 })).rejects.toBeInstanceOf(DeniedError);
    const approved = approveWhenAsked();
    expect(await guarded.invoke({ amount: 80 })).toBe('paid 80');
    await approved;
    expect(paid).toEqual([10, 80]);
    // The unguarded tool is unchanged.
    expect(await pay.invoke({ amount: 1000 })).toBe('paid 1000');
  });
});
