import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ProviderName } from '../src/modules/llm-judge/model.js';

/** One request as the fake model saw it: the provider-neutral text plus the raw wire body. */
export interface SeenRequest {
  provider: ProviderName;
  path: string;
  headers: IncomingMessage['headers'];
  system: string;
  user: string;
  body: Record<string, unknown>;
}

/**
 * What the fake model does: answer an object, answer raw text, answer a whole body verbatim, fail
 * with a status, stall, or redirect. `finish` replaces the provider's own finish reason of a success
 * (OpenAI's finish_reason, Anthropic's stop_reason, Gemini's finishReason), as sent.
 */
export type Reply =
  | { object: unknown; finish?: string }
  | { text: string; finish?: string }
  | { rawBody: string }
  | { status: number; body?: unknown }
  | { stallMs: number }
  | { redirect: string };

export type Script = (req: SeenRequest) => Reply | Promise<Reply>;

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => (typeof p === 'object' && p && 'text' in p ? String(p.text) : '')).join('');
  }
  return '';
}

/** Extracts the system and user text from each provider's request body. */
/** A provider request body, read loosely: the fields each provider sends. */
interface WireBody {
  model?: string;
  messages?: { role: string; content: unknown }[];
  system?: unknown;
  tools?: { name: string }[];
  systemInstruction?: { parts?: unknown };
  contents?: { parts: unknown }[];
}

function parse(provider: ProviderName, body: WireBody): { system: string; user: string } {
  if (provider === 'openai') {
    const msgs = body.messages ?? [];
    return {
      system: msgs
        .filter((m) => m.role === 'system' || m.role === 'developer')
        .map((m) => textOf(m.content))
        .join('\n'),
      user: msgs
        .filter((m) => m.role === 'user')
        .map((m) => textOf(m.content))
        .join('\n'),
    };
  }
  if (provider === 'anthropic') {
    return {
      system: textOf(body.system),
      user: (body.messages ?? []).map((m) => textOf(m.content)).join('\n'),
    };
  }
  return {
    system: textOf(body.systemInstruction?.parts),
    user: (body.contents ?? []).map((c) => textOf(c.parts)).join('\n'),
  };
}

/**
 * The provider's success body carrying `text`. In Anthropic's JSON tool mode the answer is the tool
 * call's `input` object: a text that is a JSON object goes into the body as it is (whitespace,
 * escapes, duplicate members and all), as a model's tool input comes over the wire.
 */
function success(provider: ProviderName, body: WireBody, text: string, finish?: string): string {
  if (provider === 'anthropic' && body.tools?.[0]) {
    let input = JSON.stringify({ text });
    try {
      const parsed: unknown = JSON.parse(text);
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) input = text;
    } catch {
      // Not JSON: wrapped as above.
    }
    // The envelope holds no other text in this mode: the placeholder occurs once.
    return JSON.stringify(envelopeOf(provider, body, text, finish)).replace('"__TOOL_INPUT__"', () => input);
  }
  return JSON.stringify(envelopeOf(provider, body, text, finish));
}

function envelopeOf(provider: ProviderName, body: WireBody, text: string, finish?: string): unknown {
  if (provider === 'openai') {
    return {
      id: 'chatcmpl-test',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: body.model,
      choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: finish ?? 'stop' }],
      usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
    };
  }
  if (provider === 'anthropic') {
    const tool = body.tools?.[0];
    let content: unknown[] = [{ type: 'text', text }];
    if (tool) {
      // success() puts the input in as text.
      content = [{ type: 'tool_use', id: 'toolu_test', name: tool.name, input: '__TOOL_INPUT__' }];
    }
    return {
      id: 'msg_test',
      type: 'message',
      role: 'assistant',
      model: body.model,
      content,
      stop_reason: finish ?? (tool ? 'tool_use' : 'end_turn'),
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 10 },
    };
  }
  return {
    candidates: [{ content: { role: 'model', parts: [{ text }] }, finishReason: finish ?? 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 10, totalTokenCount: 20 },
  };
}

function providerOf(path: string): ProviderName | null {
  if (path.endsWith('/chat/completions')) return 'openai';
  if (path.endsWith('/messages')) return 'anthropic';
  if (path.includes(':generateContent')) return 'google';
  return null;
}

export interface FakeModelServer {
  url: string;
  seen: SeenRequest[];
  script: Script;
  close(): Promise<void>;
}

/**
 * A local HTTP server speaking the wire formats of OpenAI Chat Completions, Anthropic Messages and
 * Gemini generateContent; what it answers is scripted by the test.
 */
export async function startFakeModelServer(script: Script): Promise<FakeModelServer> {
  const state: FakeModelServer = { url: '', seen: [], script, close: async () => {} };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const path = (req.url ?? '').split('?')[0]!;
      const provider = providerOf(path);
      if (!provider || req.method !== 'POST') {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as WireBody;
      const seen = {
        provider,
        path,
        headers: req.headers,
        body: body as Record<string, unknown>,
        ...parse(provider, body),
      };
      state.seen.push(seen);
      const reply = await state.script(seen);
      if ('stallMs' in reply) {
        const t = setTimeout(() => res.destroy(), reply.stallMs);
        res.on('close', () => clearTimeout(t));
        return;
      }
      if ('redirect' in reply) {
        res.writeHead(307, { location: reply.redirect }).end();
        return;
      }
      if ('status' in reply) {
        res
          .writeHead(reply.status, { 'content-type': 'application/json' })
          .end(JSON.stringify(reply.body ?? { error: { message: `status ${reply.status}`, type: 'error' } }));
        return;
      }
      if ('rawBody' in reply) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(reply.rawBody);
        return;
      }
      const text = 'object' in reply ? JSON.stringify(reply.object) : reply.text;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(success(provider, body, text, reply.finish));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return state;
}

/** Operator settings pointing every provider at the fake server (each at its own version path). */
export function fakeLlmEnv(url: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SVC_LLM_OPENAI_API_KEY: 'sk-test',
    SVC_LLM_OPENAI_BASE_URL: `${url}/openai/v1`,
    SVC_LLM_OPENAI_MODEL: 'gpt-test',
    SVC_LLM_ANTHROPIC_API_KEY: 'ak-test',
    SVC_LLM_ANTHROPIC_BASE_URL: `${url}/anthropic/v1`,
    SVC_LLM_ANTHROPIC_MODEL: 'claude-test',
    SVC_LLM_GOOGLE_API_KEY: 'gk-test',
    SVC_LLM_GOOGLE_BASE_URL: `${url}/google/v1beta`,
    SVC_LLM_GOOGLE_MODEL: 'gemini-test',
    SVC_LLM_DEFAULT_PROVIDER: 'openai',
    ...extra,
  };
}
