import { compilePolicy, describePolicy, evaluate, type PolicyDefinition } from '@svc/policy-engine';
import type { ProviderName } from '../llm-judge/model.js';
import { namePattern } from './compile.js';
import type { ToolInfo, TurnResult } from './model.js';
import { NUM_RE, numberOf } from './numbers.js';

export interface LivePolicy {
  version: number;
  isActive: boolean;
  definition: PolicyDefinition;
}

export interface ChatContext {
  tools: readonly ToolInfo[];
  policies: ReadonlyMap<string, LivePolicy>;
  fallbackTool: string | null;
  /** Which model would judge an llm policy. */
  judgeRoute: (preferred: ProviderName | null) => { provider: string | null; configured: boolean };
}

export interface ChatAnswer {
  reply: string;
  toolName: string | null;
  dryRuns: TurnResult['dryRuns'];
  /** false: the offline reader had nothing to say; a model may answer instead. */
  answered: boolean;
}

/** The call a question describes: values after argument names ("amount 5000", "to bob@x.com"). */
function callFrom(message: string, tool: ToolInfo): Record<string, unknown> | null {
  const args: Record<string, unknown> = {};
  let text = message.replace(namePattern(tool.name), ' ');
  for (const arg of [...tool.arguments].sort((a, b) => b.name.length - a.name.length)) {
    const m = new RegExp(
      // One \s* unless a separator comes between: two in a row split a run of spaces every way (quadratic).
      String.raw`${namePattern(arg.name).source}\s*(?:(?:=|:|of|is|as)\s*)?("[^"]*"|'[^']*'|[^\s,;?]+)`,
      'i',
    ).exec(text);
    if (!m) continue;
    const raw = m[1]!.replace(/^["']|["']$/g, '');
    if (arg.type === 'number') {
      const n = NUM_RE.exec(raw);
      if (!n) continue;
      args[arg.name] = numberOf(n[1]!, n[2]);
    } else if (arg.type === 'boolean') {
      args[arg.name] = /^(?:true|yes)$/i.test(raw);
    } else if (arg.type === 'string') {
      args[arg.name] = raw;
    } else continue;
    text = text.replace(m[0], ' ');
  }
  // "a $5,000 payment": money without an argument name goes to the tool's only number argument.
  const numbers = tool.arguments.filter((a) => a.type === 'number' && !(a.name in args));
  const money = NUM_RE.exec(text);
  if (numbers.length === 1 && money && /[$€£¥]|usd|eur|gbp|dollar|euro|pound/i.test(money[0])) {
    args[numbers[0]!.name] = numberOf(money[1]!, money[2]);
  }
  return Object.keys(args).length > 0 ? args : null;
}

/**
 * Answers questions about the organization's tools and policies from what is stored: lists them,
 * describes a tool's policy, and dry-runs the engine on a call the question describes.
 */
export function answerQuestion(message: string, ctx: ChatContext): ChatAnswer {
  const named = ctx.tools.filter((t) => namePattern(t.name).test(message));
  const tool = named[0] ?? ctx.tools.find((t) => t.name === ctx.fallbackTool) ?? null;
  if (!tool || (named.length === 0 && /\b(?:tools|policies|everything|all)\b/i.test(message))) {
    if (ctx.tools.length === 0) {
      return {
        reply: 'No tools are registered yet, so there are no policies to talk about.',
        toolName: null,
        dryRuns: [],
        answered: true,
      };
    }
    const lines = ctx.tools.map((t) => {
      const p = ctx.policies.get(t.name);
      const state = !p
        ? 'no policy (allowed without checks)'
        : `${p.definition.mode} policy v${p.version}${p.isActive ? '' : ' (inactive)'}`;
      return `- ${t.name} (${t.arguments.map((a) => a.name).join(', ') || 'no arguments'}): ${state}`;
    });
    const listing = /\b(?:tools|policies|list|show|what|which)\b/i.test(message);
    return {
      reply: `The registered tools and their policies:\n${lines.join('\n')}`,
      toolName: null,
      dryRuns: [],
      answered: listing,
    };
  }
  const policy = ctx.policies.get(tool.name);
  const call = callFrom(message, tool);
  if (call) {
    if (!policy?.isActive) {
      const why = policy ? 'its policy is inactive' : 'it has no policy';
      return {
        reply: `A call to ${tool.name} with ${JSON.stringify(call)} would be allowed without checks: ${why}.`,
        toolName: tool.name,
        dryRuns: [{ toolName: tool.name, arguments: call, decision: 'allow', reason: why }],
        answered: true,
      };
    }
    if (policy.definition.mode === 'llm') {
      const route = ctx.judgeRoute(policy.definition.llmConfig?.preferredModel ?? null);
      const who = route.configured
        ? `the ${route.provider} model`
        : 'a model, but none is configured, so it would be denied';
      return {
        reply: `${tool.name} has an llm policy: a call with ${JSON.stringify(call)} is judged by ${who}.`,
        toolName: tool.name,
        dryRuns: [],
        answered: true,
      };
    }
    const e = evaluate(compilePolicy(policy.definition), call);
    const verdict =
      e.decision === 'allow' ? 'allowed' : e.decision === 'deny' ? 'denied' : 'sent to a person for approval';
    const session = policy.definition.sessionConstraints
      ? ' Session limits are checked at call time and are not part of this dry run.'
      : '';
    return {
      reply: `A call to ${tool.name} with ${JSON.stringify(call)} would be ${verdict} under policy v${policy.version}${e.reason ? `: ${e.reason}` : '.'}${session}`,
      toolName: tool.name,
      dryRuns: [
        {
          toolName: tool.name,
          arguments: call,
          decision: e.decision,
          reason: e.reason ?? 'every constraint is satisfied',
        },
      ],
      answered: true,
    };
  }
  const args = tool.arguments.map((a) => `${a.name} (${a.type}${a.required ? ', required' : ''})`).join(', ');
  const rules = policy
    ? describePolicy(policy.definition)
        .map((l) => `- ${l}`)
        .join('\n')
    : '- no policy: every call is allowed without checks';
  return {
    reply: `${tool.name} takes ${args || 'no arguments'}.${policy ? ` Its policy (v${policy.version}${policy.isActive ? '' : ', inactive'}):` : ''}\n${rules}`,
    toolName: tool.name,
    dryRuns: [],
    answered: true,
  };
}
