import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from './helpers.js';
import { freePort } from './ports.js';
import {
  firstUnmatched,
  REPO_ROOT,
  readWalkthrough,
  runBlocks,
  runtimeEnv,
  type StartedServer,
  startServerProcess,
  type Walkthrough,
} from './readme.js';

/**
 * The README's walk-through, executed: the server started with the README's own command (`npm
 * start`: the compiled output, or the sources when it is missing or older than them), as a real process, on a fresh store (SQLite in a temp dir, or a fresh PostgreSQL schema under
 * SVC_TEST_DATABASE_URL) and a free port; then every shell block in order, in one bash, each
 * checked against its `# → …` lines (a block without them must print nothing).
 */
const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');

/** The environment of a user's terminal: none of this machine's service settings. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('SVC_') || k === 'PORT' || k === 'HOST' || k === 'NODE_OPTIONS') continue;
    if (k.startsWith('VITEST') || k === 'NODE_ENV') continue;
    env[k] = v;
  }
  return env;
}

describe('README walk-through', () => {
  let walkthrough: Walkthrough;
  let database: TestDatabase;
  let server: StartedServer | null = null;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    walkthrough = readWalkthrough(readme);
    database = await freshDatabase();
    const port = await freePort();
    env = {
      ...cleanEnv(),
      ...runtimeEnv(),
      PORT: String(port),
      SVC_DATABASE_URL: database.url,
    };
    server = await startServerProcess(
      walkthrough.server,
      { ...env, SVC_LOG_LEVEL: 'warn' },
      `http://127.0.0.1:${port}`,
      60_000,
    );
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
    await database?.drop();
  });

  it('keeps the quick start to npm install && npm start', () => {
    expect(readme).toMatch(/^npm install && npm start\b/m);
  });

  it('runs every shell block in order and prints what the README says', async () => {
    expect(walkthrough.blocks.length).toBeGreaterThan(5);
    const { runs, stderr } = await runBlocks(walkthrough.blocks, env, 120_000);
    const failures: string[] = [];
    walkthrough.blocks.forEach((block, i) => {
      const run = runs[i];
      const where = `README.md block at line ${block.line}`;
      if (!run) {
        failures.push(`${where} did not run to its end`);
        return;
      }
      const missing = firstUnmatched(run.stdout, block.expected);
      const problem =
        run.status !== 0
          ? `exited with status ${run.status}`
          : block.expected.length === 0 && run.stdout.trim() !== ''
            ? 'printed something, but shows no "# → " line'
            : missing !== null
              ? `should print a line like: ${missing}`
              : null;
      if (problem) failures.push(`${where} ${problem}\n--- code\n${block.code}--- printed\n${run.stdout}\n`);
    });
    expect(
      failures,
      `${failures.join('\n')}\n--- stderr of the run\n${stderr}\n--- server\n${server?.output()}`,
    ).toEqual([]);
  }, 150_000);
});
