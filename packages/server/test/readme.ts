import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SOURCE_FLAGS, SVC_FLAGS } from './bin.js';

/** The repository root: the README's commands run there, as a user runs them after cloning. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

export interface ReadmeBlock {
  /** 1-based line of the opening fence in README.md, for messages. */
  line: number;
  code: string;
  /** `# → …` lines: what the block prints, in order; `…` stands for anything on that line. */
  expected: string[];
}

export interface Walkthrough {
  /** The command of the ```sh server block: how the README starts the server. */
  server: string;
  blocks: ReadmeBlock[];
}

/** The walk-through section's shell blocks, in order. */
export function readWalkthrough(markdown: string): Walkthrough {
  const start = markdown.search(/^## Walk-through/m);
  if (start === -1) throw new Error('README.md has no "## Walk-through" section');
  const rest = markdown.slice(start + 3);
  const next = rest.search(/^## /m);
  const section = next === -1 ? rest : rest.slice(0, next);
  const lineOffset = markdown.slice(0, start + 3).split('\n').length - 1;
  let server: string | null = null;
  const blocks: ReadmeBlock[] = [];
  for (const m of section.matchAll(/^```(\w+)( server)?\n([\s\S]*?)^```$/gm)) {
    if (m[1] !== 'sh') continue;
    const code = m[3]!;
    if (m[2]) {
      server = code.trim();
      continue;
    }
    const line = lineOffset + section.slice(0, m.index).split('\n').length;
    const expected = [...code.matchAll(/^# → (.*)$/gm)].map((e) => e[1]!);
    blocks.push({ line, code, expected });
  }
  if (!server) throw new Error('the walk-through has no ```sh server block');
  return { server, blocks };
}

/** `…` matches anything within a line; everything else literally. */
export function expectationPattern(expected: string): RegExp {
  const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(expected.split('…').map(literal).join('.*?'));
}

/**
 * Finds every expectation in `output`, in order, each after the previous one (outputs without a final
 * newline run together, as in a terminal); the first that is not found, or null.
 */
export function firstUnmatched(output: string, expected: string[]): string | null {
  let at = 0;
  for (const e of expected) {
    const re = new RegExp(expectationPattern(e).source, 'g');
    re.lastIndex = at;
    const m = re.exec(output);
    if (!m) return e;
    at = m.index + m[0].length;
  }
  return null;
}

export interface BlockRun {
  stdout: string;
  status: number;
}

/**
 * Runs every block in one bash process, in order, so variables carry over as in one terminal.
 * Markers printed between blocks split the output per block.
 */
export async function runBlocks(
  blocks: ReadmeBlock[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<{ runs: BlockRun[]; stderr: string }> {
  const marker = `@@readme-${process.pid}`;
  const script = blocks
    .map(
      (b, i) => `printf '\\n${marker} start ${i}\\n'\n${b.code}\nprintf '\\n${marker} end ${i} %s\\n' "$?"`,
    )
    .join('\n');
  const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((done, fail) => {
    execFile(
      'bash',
      ['-c', script],
      { cwd: REPO_ROOT, env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024, killSignal: 'SIGKILL' },
      (err, out, errOut) => {
        // A block's own failure shows in its status; only a crash or the timeout fails the run.
        if (err && (err.killed || typeof err.code !== 'number'))
          fail(new Error(`the walk-through did not finish: ${err.message}\n${errOut}`));
        else done({ stdout: out, stderr: errOut });
      },
    );
  });
  const runs: BlockRun[] = [];
  const re = new RegExp(`\\n${marker} start (\\d+)\\n([\\s\\S]*?)\\n${marker} end \\1 (\\d+)\\n`, 'g');
  for (const m of stdout.matchAll(re)) runs[Number(m[1])] = { stdout: m[2]!, status: Number(m[3]) };
  return { runs, stderr };
}

/**
 * Extra environment under which the README's commands (`npm start`, `npx svc`) run as written: none
 * when the compiled output is current, as after `npm install`; otherwise (sources edited since, or
 * never built) the commands load the sources, as `npm run dev` does, so the test checks this tree.
 */
export function runtimeEnv(): NodeJS.ProcessEnv {
  return SVC_FLAGS.length === 0 ? {} : { NODE_OPTIONS: SOURCE_FLAGS.join(' ') };
}

export interface StartedServer {
  process: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/** Starts `command` with bash in its own process group; resolves once GET /readyz answers 200. */
export async function startServerProcess(
  command: string,
  env: NodeJS.ProcessEnv,
  baseUrl: string,
  timeoutMs: number,
): Promise<StartedServer> {
  const child = spawn('bash', ['-c', command], { cwd: REPO_ROOT, env, detached: true });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  let exited = false;
  const exit = new Promise<void>((r) =>
    child.once('exit', () => {
      exited = true;
      r();
    }),
  );
  const stop = async () => {
    if (exited) return;
    // The whole group: bash, npm and the server it started.
    process.kill(-child.pid!, 'SIGTERM');
    const killed = setTimeout(() => {
      if (!exited) process.kill(-child.pid!, 'SIGKILL');
    }, 10_000);
    await exit;
    clearTimeout(killed);
  };
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (exited) throw new Error(`the server exited before it was ready:\n${output}`);
    const ok = await fetch(`${baseUrl}/readyz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return { process: child, output: () => output, stop };
    await new Promise((r) => setTimeout(r, 150));
  }
  await stop();
  throw new Error(`the server was not ready within ${timeoutMs} ms:\n${output}`);
}
