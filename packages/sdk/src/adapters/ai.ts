import type { Tool, ToolExecutionOptions } from 'ai';
import type { Client } from '../model.js';
import { asArgs, contextOf, type GuardOptions } from './common.js';

// biome-ignore lint/suspicious/noExplicitAny: any Tool, whatever its input and output types
type AnyTool = Tool<any, any>;

/**
 * Guards a Vercel AI SDK `tool()`: its `execute` runs only when the policy allows the call (waiting
 * for a person on require_approval); a denial throws DeniedError, which the AI SDK reports to the
 * model as a tool error. Tools without `execute` are returned unchanged.
 */
export function guardTool<T extends AnyTool>(
  client: Client,
  toolName: string,
  tool: T,
  options: GuardOptions<ToolExecutionOptions> = {},
): T {
  const execute = tool.execute;
  if (!execute) return tool;
  return {
    ...tool,
    execute: async (input: unknown, execOptions: ToolExecutionOptions) => {
      const args = asArgs(input);
      const context = contextOf(options, args, execOptions) ?? { call_id: execOptions.toolCallId };
      await client.enforce(toolName, args, context, { signal: execOptions.abortSignal, ...options.approval });
      return execute.call(tool, input, execOptions);
    },
  } as T;
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
