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

export default defineConfig({
  // Workspace packages resolve to their TypeScript sources (the `@svc/source` export condition), so
  // tests never run a stale build. The other three are Vite's defaults for server code.
  ssr: { resolve: { conditions: ['@svc/source', 'module', 'node', 'development|production'] } },
  test: {
    include: ['packages/*/src/**/*.test.ts', 'packages/*/test/**/*.test.ts', 'bench/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    reporters: ['default', plainSummary],
  },
});
