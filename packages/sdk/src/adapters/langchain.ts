import type { StructuredToolInterface } from '@langchain/core/tools';
import type { Client } from '../model.js';
import { asArgs, contextOf, type GuardOptions } from './common.js';

type Call = (arg: unknown, runManager?: unknown, config?: unknown) => Promise<unknown>;

/**
 * Guards a LangChain.js tool (`tool()`, DynamicStructuredTool, StructuredTool): after LangChain
 * parsed the input against the tool's schema, the call runs only when the policy allows it
 * (waiting for a person on require_approval); a denial throws DeniedError. The guarded tool is the
 * same tool otherwise (name, schema, callbacks, `instanceof`).
 */
export function guardLangChainTool<T extends StructuredToolInterface>(
  client: Client,
  tool: T,
  options: GuardOptions<unknown> = {},
): T {
  const original = (tool as unknown as { _call: Call })._call.bind(tool);
  const guarded = Object.create(tool) as T & { _call: Call };
  guarded._call = async (arg, runManager, config) => {
    const args = asArgs(arg);
    await client.enforce(tool.name, args, contextOf(options, args, config), options.approval);
    return original(arg, runManager, config);
  };
  return guarded;
}
