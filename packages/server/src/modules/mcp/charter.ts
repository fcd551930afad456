import { type Static, Type } from '@sinclair/typebox';
import type { ToolArgument } from '@svc/policy-engine';
import { AppError } from '../../lib/errors.js';
import { compileSchema } from '../../lib/schemas.js';
import type { OrgScope } from '../../lib/scope.js';
import type { CharterService } from '../charter/service.js';
import { dropNulls } from '../policies/model.js';
import { ArgumentName, NewToolName } from '../tools/schemas.js';
import { GATEWAY_VERSION } from './gateway.js';
import {
  isObject,
  negotiateVersion,
  RPC,
  type RpcRequest,
  type RpcResponse,
  rpcError,
  rpcResult,
} from './jsonrpc.js';
import { Opt } from './schemas.js';

const Text = Type.String({ minLength: 1, maxLength: 20_000 });

const ArgumentIn = Type.Object(
  {
    name: ArgumentName,
    type: Type.Union(['string', 'number', 'boolean', 'array', 'object'].map((t) => Type.Literal(t))),
    description: Opt(Type.String()),
    required: Opt(Type.Boolean()),
    enum: Opt(Type.Array(Type.String())),
    minimum: Opt(Type.Number()),
    maximum: Opt(Type.Number()),
    pattern: Opt(Type.String()),
  },
  { additionalProperties: false },
);

const RegisterArgs = Type.Object(
  {
    tools: Type.Array(
      Type.Object(
        {
          name: NewToolName,
          description: Opt(Type.String()),
          parameters: Opt(Type.Array(ArgumentIn)),
          arguments: Opt(Type.Array(ArgumentIn)),
        },
        { additionalProperties: false },
      ),
      { minItems: 1 },
    ),
  },
  { additionalProperties: false },
);
const checkRegister = compileSchema(RegisterArgs);

const Message = { message: Text, conversationId: Opt(Type.String({ format: 'uuid' })) };
const Empty = Type.Object({}, { additionalProperties: false });

/** The native tools, as tools/list shows them; TypeBox schemas are plain JSON Schema once serialised. */
export const CHARTER_TOOLS = [
  {
    name: 'svc_charter_turn',
    description: 'Talk to the policy assistant: ask about policies (chat) or have one drafted (compile).',
    inputSchema: Type.Object({
      ...Message,
      mode: Opt(
        Type.Union([Type.Literal('auto'), Type.Literal('chat'), Type.Literal('compile')], {
          default: 'auto',
        }),
      ),
    }),
  },
  {
    name: 'svc_charter_chat',
    description: 'Ask the policy assistant a question about policies; changes nothing.',
    inputSchema: Type.Object(Message),
  },
  {
    name: 'svc_charter_compile',
    description:
      'Have the policy assistant draft a policy from a description; it goes live only after review.',
    inputSchema: Type.Object(Message),
  },
  {
    name: 'svc_list_tools',
    description: "List the organization's registered tools with their arguments.",
    inputSchema: Empty,
  },
  {
    name: 'svc_register_tools',
    description:
      'Propose tool definitions (as POST /v1/tools/register): each tool has a name, a description and ' +
      'parameters (or arguments) of {name, type, required}. They are registered, with starter policies for new tools, ' +
      'once a person approves at structuredContent.verification.linkUrl.',
    inputSchema: RegisterArgs,
  },
];

export interface RegisteredTool {
  name: string;
  description: string | null;
  arguments: string;
  created_at: string;
  updated_at: string;
}

export interface CharterDeps {
  listTools: (organizationId: string) => Promise<RegisteredTool[]>;
  /** The policy assistant: turns, and tool registrations held for verification. */
  assistant: Pick<CharterService, 'turn' | 'proposeTools'>;
}

const MODES = new Set(['auto', 'chat', 'compile']);

const toolError = (text: string) => ({ content: [{ type: 'text', text }], isError: true });

export function createCharter(deps: CharterDeps) {
  async function listTools(scope: OrgScope) {
    const tools = (await deps.listTools(scope.organizationId)).map((r) => ({
      name: r.name,
      description: r.description,
      arguments: JSON.parse(r.arguments) as unknown[],
      createdAt: r.created_at,
      updatedAt: r.updated_at,
    }));
    return {
      content: [{ type: 'text', text: JSON.stringify({ tools }, null, 2) }],
      structuredContent: { tools },
    };
  }

  async function registerTools(scope: OrgScope, args: unknown) {
    const input = dropNulls(args);
    if (!checkRegister.Check(input)) {
      const first = checkRegister.Errors(input).First();
      return toolError(
        `Invalid arguments: ${first ? `${first.path || '/'} ${first.message}` : 'see the input schema'}`,
      );
    }
    const tools = [];
    for (const [i, t] of (input as Static<typeof RegisterArgs>).tools.entries()) {
      const given = t.parameters ?? t.arguments;
      if (!given || (t.parameters && t.arguments)) {
        return toolError(`Invalid arguments: /tools/${i} needs exactly one of parameters or arguments`);
      }
      tools.push({
        name: t.name,
        ...(t.description !== undefined ? { description: t.description } : {}),
        arguments: given as ToolArgument[],
      });
    }
    try {
      const { verification } = await deps.assistant.proposeTools(scope, tools);
      const names = tools.map((t) => t.name);
      // Like every change proposed here, registration waits for a person: nothing is live yet.
      const link = verification.required ? verification.linkUrl : '';
      const message = `${names.length} tool${names.length === 1 ? '' : 's'} (${names.join(', ')}) waiting for verification: nothing is registered until a person approves at ${link}`;
      return {
        content: [{ type: 'text', text: message }],
        structuredContent: {
          success: true,
          registered_tools: [],
          pending_tools: names,
          message,
          verification,
        },
      };
    } catch (err) {
      if (err instanceof AppError && err.status < 500) return toolError(err.message);
      throw err;
    }
  }

  async function charterTurn(scope: OrgScope, name: string, args: Record<string, unknown>) {
    const message = args.message;
    if (typeof message !== 'string' || message.trim() === '' || message.length > 20_000) {
      return toolError('Invalid arguments: message must be a non-empty string of at most 20000 characters');
    }
    const mode =
      name === 'svc_charter_chat'
        ? 'chat'
        : name === 'svc_charter_compile'
          ? 'compile'
          : (args.mode ?? 'auto');
    if (typeof mode !== 'string' || !MODES.has(mode))
      return toolError('Invalid arguments: mode must be auto, chat or compile');
    const conversationId = args.conversationId;
    if (conversationId !== undefined && typeof conversationId !== 'string') {
      return toolError('Invalid arguments: conversationId must be a string');
    }
    try {
      const result = await deps.assistant.turn(scope, {
        message,
        mode: mode as 'auto' | 'chat' | 'compile',
        surface: 'mcp',
        conversationId,
      });
      const link = result.verification.required
        ? `\n\nReview and approve: ${result.verification.linkUrl}`
        : '';
      return { content: [{ type: 'text', text: `${result.reply}${link}` }], structuredContent: result };
    } catch (err) {
      if (err instanceof AppError && err.status < 500) return toolError(err.message);
      throw err;
    }
  }

  return {
    /** One JSON-RPC request to POST /v1/mcp/charter. Stateless: no session is issued. */
    async handle(scope: OrgScope, req: RpcRequest): Promise<RpcResponse> {
      switch (req.method) {
        case 'initialize':
          return rpcResult(req.id, {
            protocolVersion: negotiateVersion(req.params),
            capabilities: { tools: {} },
            serverInfo: { name: 'svc-charter', version: GATEWAY_VERSION },
            instructions:
              'Native tools of the policy service: ask the policy assistant about tools and policies (svc_charter_chat), ' +
              'have it draft policy changes (svc_charter_compile) and register tools; every change waits for a person to approve it at verification.linkUrl.',
          });
        case 'ping':
          return rpcResult(req.id, {});
        case 'tools/list':
          return rpcResult(req.id, { tools: CHARTER_TOOLS });
        case 'tools/call': {
          const p = req.params;
          if (!p || typeof p.name !== 'string' || (p.arguments !== undefined && !isObject(p.arguments))) {
            return rpcError(
              req.id,
              RPC.invalidRequest,
              'Invalid Request: tools/call needs params.name (string) and params.arguments (object)',
            );
          }
          switch (p.name) {
            case 'svc_charter_turn':
            case 'svc_charter_chat':
            case 'svc_charter_compile':
              return rpcResult(req.id, await charterTurn(scope, p.name, p.arguments ?? {}));
            case 'svc_list_tools':
              return rpcResult(req.id, await listTools(scope));
            case 'svc_register_tools':
              return rpcResult(req.id, await registerTools(scope, p.arguments ?? {}));
            default:
              return rpcError(req.id, RPC.invalidParams, `Unknown tool: ${p.name}`);
          }
        }
        default:
          return rpcError(req.id, RPC.methodNotFound, `Method not found: ${req.method}`);
      }
    },
  };
}

export type Charter = ReturnType<typeof createCharter>;
