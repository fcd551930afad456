import type { RunnerTask, RunnerTestFile } from 'vitest';
import { defineConfig } from 'vitest/config';

/** Closes the run with one plain line, `Tests: N passed, N failed, N skipped`, after vitest's own summary. */
const plainSummary = {
  onFinished(files: RunnerTestFile[] = [], errors: unknown[] = []) {
    const count = { passed: 0, failed: 0, skipped: 0 };
    const visit = (task: RunnerTask) => {
      if (task.type === 'suite') {
        for (const t of task.tasks) visit(t);
        // A file that failed to load has no tests to count: count the file itself as failed.
        if (task.tasks.length === 0 && task.result?.state === 'fail') count.failed++;
        return;
      }
      if (task.mode === 'skip' || task.mode === 'todo') count.skipped++;
      else if (task.result?.state === 'pass') count.passed++;
      else count.failed++;
    };
    for (const file of files) visit(file);
    count.failed += errors.length;
    console.log(`Tests: ${count.passed} passed, ${count.failed} failed, ${count.skipped} skipped`);
  },
};

const testFiles = ['packages/*/src/**/*.test.ts', 'packages/*/test/**/*.test.ts', 'bench/**/*.test.ts'];

/**
 * Files that replace a module (`vi.mock`) or a global for the whole file get a fresh module graph of
 * their own: in the shared process the module may already be loaded, unmocked, by an earlier file.
 */
const ownGraph = [
  'packages/server/src/server.test.ts',
  'packages/server/src/plugins/openapi.test.ts',
  'packages/server/test/fuzz.test.ts',
  'packages/server/test/isolation-sweep.test.ts',
  'packages/sdk/test/log-idempotency.test.ts',
];

export default defineConfig({
  // Workspace packages resolve to their TypeScript sources (the `@svc/source` export condition), so
  // tests never run a stale build. The other three are Vite's defaults for server code.
  ssr: { resolve: { conditions: ['@svc/source', 'module', 'node', 'development|production'] } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default', plainSummary],
    // One file at a time, whatever the number of cores: tests of one file may stop servers, drop
    // schemas and time things that other files running beside them would disturb.
    fileParallelism: false,
    // Isolation is set per pool, not per project: forks run the shared project's files one after
    // another in one process; threads give each file of the isolated project a fresh module graph.
    poolOptions: { forks: { isolate: false }, threads: { isolate: true } },
    projects: [
      {
        // Most files share one process and its loaded modules: importing the server's sources once
        // instead of once per file takes minutes off a run.
        extends: true,
        test: {
          name: 'shared',
          include: testFiles,
          exclude: ownGraph,
          pool: 'forks',
          sequence: { groupOrder: 0 },
        },
      },
      // After the shared files, not beside them: one file at a time, as the tests expect (a schema
      // dropped by one file while another migrates fails the migration's catalog read on PostgreSQL).
      {
        extends: true,
        test: { name: 'isolated', include: ownGraph, pool: 'threads', sequence: { groupOrder: 1 } },
      },
    ],
  },
});
