import type { Tool, ToolExecutionOptions } from 'ai';
import type { Client } from '../model.js';
import { asArgs, contextOf, type GuardOptions } from './common.js';

// biome-ignore lint/suspicious/noExplicitAny: any Tool, whatever its input and output types
type AnyTool = Tool<any, any>;
type Execute = (input: unknown, options: ToolExecutionOptions) => unknown;

const isAsyncIterable = (value: unknown): value is AsyncIterable<unknown> =>
  value != null && typeof (value as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function';

/** `async function*`: its calls are async iterables, which the AI SDK streams chunk by chunk. */
const isAsyncGeneratorFunction = (fn: unknown): boolean =>
  Object.prototype.toString.call(fn) === '[object AsyncGeneratorFunction]';

/**
 * Guards a Vercel AI SDK `tool()`: its `execute` runs only when the policy allows the call (waiting
 * for a person on require_approval); a denial throws DeniedError, which the AI SDK reports to the
 * model as a tool error. Tools without `execute` are returned unchanged.
 *
 * A streaming tool whose `execute` is an `async function*` stays one: the guarded `execute` is an
 * async generator that is checked before its first chunk, then yields the tool's chunks as they
 * come (preliminary results included). Another `execute` that returns an async iterable is checked
 * the same way, but the AI SDK cannot see it streams before the check is done: its chunks are read
 * here and the last one is the result.
 */
export function guardTool<T extends AnyTool>(
  client: Client,
  toolName: string,
  tool: T,
  options: GuardOptions<ToolExecutionOptions> = {},
): T {
  const execute = tool.execute as Execute | undefined;
  if (!execute) return tool;
  const enforce = (input: unknown, execOptions: ToolExecutionOptions) => {
    const args = asArgs(input);
    const context = contextOf(options, args, execOptions) ?? { call_id: execOptions.toolCallId };
    return client.enforce(toolName, args, context, { signal: execOptions.abortSignal, ...options.approval });
  };
  const guarded = isAsyncGeneratorFunction(execute)
    ? async function* (input: unknown, execOptions: ToolExecutionOptions) {
        await enforce(input, execOptions);
        yield* execute.call(tool, input, execOptions) as AsyncIterable<unknown>;
      }
    : async (input: unknown, execOptions: ToolExecutionOptions) => {
        await enforce(input, execOptions);
        const result = await execute.call(tool, input, execOptions);
        if (!isAsyncIterable(result)) return result;
        // The AI SDK's own result of a streaming tool: its last chunk.
        let last: unknown;
        for await (const chunk of result) last = chunk;
        return last;
      };
  return { ...tool, execute: guarded } as T;
}

/** Guards every tool of a `tools` object, each under its key as the tool name. */
export function guardTools<T extends Record<string, AnyTool>>(
  client: Client,
  tools: T,
  options: GuardOptions<ToolExecutionOptions> = {},
): T {
  const out: Record<string, AnyTool> = {};
  for (const [name, tool] of Object.entries(tools)) out[name] = guardTool(client, name, tool, options);
  return out as T;
}
