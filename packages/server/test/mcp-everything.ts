import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { freePort } from './ports.js';

/**
 * The reference MCP server `@modelcontextprotocol/server-everything`, run as it ships (its own
 * Express transports) in a child process on a free loopback port: `streamableHttp` serves /mcp,
 * `sse` serves /sse (+ /message).
 */
export interface Everything {
  url: string;
  stop(): Promise<void>;
}

export type EverythingMode = 'streamableHttp' | 'sse';

const entry = createRequire(import.meta.url).resolve('@modelcontextprotocol/server-everything/dist/index.js');

export async function startEverything(mode: EverythingMode): Promise<Everything> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [entry, mode], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4000);
  });
  const url = `http://127.0.0.1:${port}${mode === 'sse' ? '/sse' : '/mcp'}`;
  const deadline = Date.now() + 15_000;
  // Up once its port answers HTTP (any status).
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server-everything exited: ${stderr}`);
    const up = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(500) }).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) throw new Error(`server-everything did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}
