/**
 * LLM judge overhead, without a model's own latency: judgements against a local server speaking the
 * OpenAI Chat Completions wire format that answers at once. Figures: the service's own cost per
 * judgement on a cache miss (prompt, SDK, HTTP, schema and answer checks) and on a cache hit, and the
 * Charter compiler's offline throughput.
 * Run: node --conditions=@svc/source --import tsx bench/llm-judge.ts
 */
import { pathToFileURL } from 'node:url';
import { compileMessage } from '../packages/server/src/modules/charter/compile.js';
import { loadLlmSettings } from '../packages/server/src/modules/llm-judge/config.js';
import { createJudge } from '../packages/server/src/modules/llm-judge/judge.js';
import { fakeLlmEnv, startFakeModelServer } from '../packages/server/test/llm-providers.js';

export const COMMAND = 'node --conditions=@svc/source --import tsx bench/llm-judge.ts';

const ALLOW = { decision: 'allow', reason: 'ok', failedArgument: null, matchedException: null };

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function runLlmJudgeBench(n = 2000) {
  const server = await startFakeModelServer(() => ({ object: ALLOW }));
  try {
    const judge = createJudge({
      settings: loadLlmSettings(fakeLlmEnv(server.url, { SVC_LLM_CACHE_SIZE: String(n * 2) })),
    });
    const request = (i: number) => ({
      organizationId: 'org',
      toolName: 'send_email',
      policyVersion: 1,
      policyHash: `sha256:${'0'.repeat(64)}`,
      description: 'Only recipients at example.com.',
      exceptions: [],
      argumentInstructions: [],
      preferredModel: 'openai' as const,
      arguments: { to: `user${i}@example.com`, subject: 'hello' },
    });
    for (let i = 0; i < 200; i++) await judge.judge(request(-i - 1)); // warm-up
    const miss: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const v = await judge.judge(request(i));
      miss.push(performance.now() - t0);
      if (!v.ok) throw new Error(`bench judgement failed: ${v.message}`);
    }
    const hit: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await judge.judge(request(i));
      hit.push(performance.now() - t0);
    }
    miss.sort((a, b) => a - b);
    hit.sort((a, b) => a - b);

    const tools = [
      {
        name: 'send_payment',
        description: null,
        arguments: [
          { name: 'amount', type: 'number' as const },
          { name: 'currency', type: 'string' as const },
        ],
      },
    ];
    const message =
      'Block send_payment over $1,000 and ask a person above $500. Currency must be USD or EUR.';
    const t0 = performance.now();
    let m = 0;
    while (performance.now() - t0 < 1000) {
      compileMessage(message, tools, null);
      m++;
    }
    return {
      missP50: percentile(miss, 50),
      missP99: percentile(miss, 99),
      hitP50: percentile(hit, 50),
      hitP99: percentile(hit, 99),
      compilesPerSec: m / ((performance.now() - t0) / 1000),
    };
  } finally {
    await server.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  console.log(`# ${COMMAND}`);
  const r = await runLlmJudgeBench();
  const ms = (v: number) => `${v.toFixed(3)} ms`;
  console.log(
    `judge, cache miss (local server answering at once): p50 ${ms(r.missP50)}, p99 ${ms(r.missP99)}`,
  );
  console.log(`judge, cache hit: p50 ${ms(r.hitP50)}, p99 ${ms(r.hitP99)}`);
  console.log(
    `charter offline compile: ${Math.round(r.compilesPerSec).toLocaleString('en-US')} messages/s (3 rules each)`,
  );
}
