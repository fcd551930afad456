import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import type { Client } from '../model.js';
import { asArgs, contextOf, type GuardOptions } from './common.js';

type CallToolParams = Parameters<McpClient['callTool']>[0];

/**
 * Guards an MCP client: `callTool` checks the call against the policy first and forwards it only
 * when allowed (waiting for a person on require_approval); a denial throws DeniedError and the
 * server is never called. Every other method is the client's own.
 */
export function guardMcpClient<C extends McpClient>(
  client: Client,
  mcp: C,
  options: GuardOptions<CallToolParams> = {},
): C {
  const callTool: McpClient['callTool'] = async (params, resultSchema, requestOptions) => {
    const args = asArgs(params.arguments);
    await client.enforce(params.name, args, contextOf(options, args, params), {
      ...(requestOptions?.signal ? { signal: requestOptions.signal } : {}),
      ...options.approval,
    });
    return mcp.callTool(params, resultSchema, requestOptions);
  };
  return new Proxy(mcp, {
    get(target, prop, receiver) {
      if (prop === 'callTool') return callTool;
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
