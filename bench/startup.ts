/**
 * Start-up time and memory of `svc serve`: the compiled build (production) against the TypeScript
 * sources through tsx's loader (how the server ran before it was compiled).
 * Run: npm run build && node --import tsx bench/startup.ts   (BENCH_STARTS, default 7 per mode)
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { statCpuMs } from './lib.js';

export const COMMAND = 'npm run build && node --import tsx bench/startup.ts';

const ROOT = join(import.meta.dirname, '..');
const BIN = join(ROOT, 'packages/server/bin/svc.js');

export const MODES = {
  compiled: ['--enable-source-maps', BIN, 'serve'],
  'tsx loader': ['--conditions=@svc/source', '--import', 'tsx', BIN, 'serve'],
} as const;

export interface StartFigures {
  /** Milliseconds from spawn until GET /healthz first answers 200. */
  readyMs: number;
  /** CPU time (user + system, ms) the process used until ready: unlike readyMs, not inflated by a busy machine. */
  cpuMs: number;
  /** Resident set size (MiB) once ready and idle for a second. */
  rssMiB: number;
}

const cpuMs = (pid: number): number => statCpuMs(`/proc/${pid}/stat`);

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
  return kb / 1024;
}

async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  await exited;
}

async function startOnce(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  port: number,
): Promise<StartFigures> {
  const url = `http://127.0.0.1:${port}/healthz`;
  const started = performance.now();
  const proc = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1', SVC_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`svc serve exited with ${proc.exitCode}`);
      try {
        if ((await fetch(url)).ok) break;
      } catch {
        // not listening yet
      }
      if (performance.now() - started > 30_000) throw new Error('svc serve did not become ready');
      await sleep(5);
    }
    const readyMs = performance.now() - started;
    const cpu = cpuMs(proc.pid!);
    await sleep(1000);
    return { readyMs, cpuMs: cpu, rssMiB: rssMiB(proc.pid!) };
  } finally {
    await stop(proc);
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

/** Starts each mode `runs` times, interleaved, on one migrated embedded store; returns the medians. */
export async function runStartupBench(runs = 7, port = 18470): Promise<Record<string, StartFigures>> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-startup-'));
  const env = {
    SVC_DATABASE_URL: `sqlite:${join(dir, 'svc.db')}`,
    SVC_JWT_SECRET: 'bench-secret-of-at-least-32-bytes!',
  };
  try {
    const samples: Record<string, StartFigures[]> = {};
    // One start per mode first, not counted: migrates the store and warms the file cache.
    for (const args of Object.values(MODES)) await startOnce(args, env, port);
    for (let i = 0; i < runs; i++) {
      for (const [mode, args] of Object.entries(MODES)) {
        const figures = await startOnce(args, env, port);
        samples[mode] = [...(samples[mode] ?? []), figures];
      }
    }
    return Object.fromEntries(
      Object.entries(samples).map(([mode, xs]) => [
        mode,
        {
          readyMs: median(xs.map((x) => x.readyMs)),
          cpuMs: median(xs.map((x) => x.cpuMs)),
          rssMiB: median(xs.map((x) => x.rssMiB)),
        },
      ]),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = Number(process.env.BENCH_STARTS ?? 7);
  console.log(`# ${COMMAND}  (BENCH_STARTS=${runs}, node ${process.version})`);
  for (const [mode, f] of Object.entries(await runStartupBench(runs))) {
    console.log(
      `${mode}: ready in ${f.readyMs.toFixed(0)} ms, CPU ${f.cpuMs.toFixed(0)} ms, RSS ${f.rssMiB.toFixed(1)} MiB (median of ${runs})`,
    );
  }
}
