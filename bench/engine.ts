/**
 * Policy-engine throughput: evaluations per second of a 3-constraint policy on the allow and deny paths.
 * Run: node --import tsx bench/engine.ts
 */
import { pathToFileURL } from 'node:url';
import { compilePolicy, evaluate, type PolicyDefinition } from '../packages/policy-engine/src/index.js';

export const COMMAND = 'node --import tsx bench/engine.ts';
export const TARGET_PER_SEC = 1_000_000;
const WARMUP_MS = 500;
const MEASURE_MS = 2_000;

/** The policy the target refers to: a required string enum, a number in 0..1000 and a regex. */
export const BENCH_POLICY: PolicyDefinition = {
  mode: 'deterministic',
  constraints: [
    { argumentName: 'currency', required: true, enum: ['USD', 'EUR', 'GBP'] },
    { argumentName: 'amount', minimum: 0, maximum: 1000 },
    { argumentName: 'account', regex: '^acct_[a-z0-9]{8}$' },
  ],
};

const CURRENCIES = ['USD', 'EUR', 'GBP'];

/** Distinct argument objects so that no input is a constant the JIT could fold. */
function callsFor(kind: 'allow' | 'deny'): Record<string, unknown>[] {
  return Array.from({ length: 64 }, (_, i) => ({
    currency: CURRENCIES[i % 3],
    amount: kind === 'allow' ? (i * 37) % 1000 : 1000 + i + 1,
    account: `acct_${(0x10000000 + i * 7919).toString(16).slice(0, 8)}`,
    memo: 'invoice',
  }));
}

function measure(kind: 'allow' | 'deny'): number {
  const compiled = compilePolicy(BENCH_POLICY);
  const calls = callsFor(kind);
  for (const call of calls) {
    if (evaluate(compiled, call).decision !== kind) throw new Error(`bench input is not a ${kind} case`);
  }
  let sink = 0;
  const loop = (ms: number): number => {
    let n = 0;
    const end = performance.now() + ms;
    // Check the clock every 4096 evaluations so timing costs stay out of the figure.
    while (performance.now() < end) {
      for (let i = 0; i < 4096; i++) {
        if (evaluate(compiled, calls[i & 63]!).failedArgument !== null) sink++;
      }
      n += 4096;
    }
    return n;
  };
  loop(WARMUP_MS);
  const start = performance.now();
  const n = loop(MEASURE_MS);
  const seconds = (performance.now() - start) / 1000;
  if (sink < 0) console.log(sink);
  return n / seconds;
}

export async function runEngineBench(): Promise<{ allowPerSec: number; denyPerSec: number }> {
  const allowPerSec = measure('allow');
  const denyPerSec = measure('deny');
  return { allowPerSec, denyPerSec };
}

async function main(): Promise<void> {
  console.log(`command: ${COMMAND}`);
  console.log(`node ${process.version}, warm-up ${WARMUP_MS} ms, ${MEASURE_MS} ms per path, one core`);
  const { allowPerSec, denyPerSec } = await runEngineBench();
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  console.log(`allow path: ${fmt(allowPerSec)} evaluations/s`);
  console.log(`deny path:  ${fmt(denyPerSec)} evaluations/s`);
  const pass = allowPerSec >= TARGET_PER_SEC;
  console.log(`${pass ? 'PASS' : 'FAIL'}: allow path ${pass ? '>=' : '<'} ${fmt(TARGET_PER_SEC)}/s`);
  if (!pass) process.exitCode = 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
