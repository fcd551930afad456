import type { FunctionTool, RunContext } from '@openai/agents';
import { SvcError } from '../errors.js';
import type { Client } from '../model.js';
import { contextOf, type GuardOptions } from './common.js';

// biome-ignore lint/suspicious/noExplicitAny: any FunctionTool, whatever its context and result types
type AnyFunctionTool = FunctionTool<any, any, any>;

type Details = Parameters<AnyFunctionTool['invoke']>[2];

export interface FunctionToolGuardOptions extends GuardOptions<RunContext<unknown>> {
  /** Throw DeniedError (and approval errors) out of the run instead of telling the model. */
  throwOnDeny?: boolean;
  /**
   * The tool's answer to the model for a refused call (DeniedError, ApprovalDeniedError...): what
   * this returns. Default: the tool's own `errorFunction` when the tool object carries one, else the
   * error's message. `tool()` of @openai/agents keeps `errorFunction` on the tool only when it has
   * an `outputSchema`: for other tools, pass it here.
   */
  errorFunction?(context: RunContext<unknown>, error: SvcError, details?: Details): unknown;
}

/**
 * Guards an OpenAI Agents SDK function tool (from `tool()`): `invoke` runs only when the policy
 * allows the call (waiting for a person on require_approval). By default a refusal is the tool's
 * answer to the model (`Tool call "pay" denied: ...`, or the output of `options.errorFunction`, else
 * of the tool's own `errorFunction` when the tool object carries one), so the agent can adapt; with
 * `throwOnDeny` it ends the run instead.
 */
export function guardFunctionTool<T extends AnyFunctionTool>(
  client: Client,
  tool: T,
  options: FunctionToolGuardOptions = {},
): T {
  const invoke: AnyFunctionTool['invoke'] = async (runContext, input, details) => {
    let args: Record<string, unknown>;
    try {
      args = input === '' ? {} : JSON.parse(input);
    } catch {
      // Not JSON: the tool's own parsing reports it, exactly as without the guard.
      return tool.invoke(runContext, input, details);
    }
    try {
      await client.enforce(tool.name, args, contextOf(options, args, runContext), {
        ...(details?.signal ? { signal: details.signal } : {}),
        ...options.approval,
      });
    } catch (err) {
      if (!(err instanceof SvcError) || options.throwOnDeny) throw err;
      if (options.errorFunction) return options.errorFunction(runContext, err, details);
      return tool.errorFunction ? tool.errorFunction(runContext, err, details) : err.message;
    }
    return tool.invoke(runContext, input, details);
  };
  return { ...tool, invoke };
}
