import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The `svc` command. */
export const SVC_BIN = join(import.meta.dirname, '..', 'bin', 'svc.js');

/** Node flags that load this repository's TypeScript sources: tsx, and the packages' `@svc/source` exports. */
export const SOURCE_FLAGS = ['--conditions=@svc/source', '--import', 'tsx'];

const PACKAGES = join(import.meta.dirname, '..', '..');

/** Newest modification time of the files under `dir` but tests. */
function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (!entry.name.endsWith('.test.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * Whether the compiled output Node runs (`dist/` of every package built with tsc; `npm install`
 * builds them) is there and no older than its sources and build settings. The dashboard is not among
 * them: the server serves its build whichever way the server itself runs.
 */
function builtOutputIsCurrent(): boolean {
  return readdirSync(PACKAGES)
    .filter((name) => existsSync(join(PACKAGES, name, 'tsconfig.build.json')))
    .every((name) => {
      const dist = join(PACKAGES, name, 'dist');
      if (!existsSync(dist)) return false;
      const built = readdirSync(dist)
        .filter((f) => f.endsWith('.js'))
        .map((f) => statSync(join(dist, f)).mtimeMs);
      const newest = Math.max(
        newestSource(join(PACKAGES, name, 'src')),
        statSync(join(PACKAGES, name, 'tsconfig.build.json')).mtimeMs,
        statSync(join(PACKAGES, '..', 'tsconfig.build.json')).mtimeMs,
        statSync(join(PACKAGES, '..', 'tsconfig.json')).mtimeMs,
      );
      return built.length > 0 && Math.min(...built) >= newest;
    });
}

/**
 * Node flags under which `svc` runs this tree as it is: none when the compiled output is current, as
 * after `npm install` (a process then starts in about half the time and a third of the CPU), and
 * otherwise the sources, so a test never runs a stale build.
 */
export const SVC_FLAGS: readonly string[] = builtOutputIsCurrent() ? [] : SOURCE_FLAGS;
