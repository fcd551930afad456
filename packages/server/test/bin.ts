import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The `svc` command. */
export const SVC_BIN = join(import.meta.dirname, '..', 'bin', 'svc.js');

/** Node flags that load this repository's TypeScript sources: tsx, and the packages' `@svc/source` exports. */
export const SOURCE_FLAGS = ['--conditions=@svc/source', '--import', 'tsx'];

const PACKAGES = join(import.meta.dirname, '..', '..');

/** Newest modification time of the non-test TypeScript sources under `dir`. */
function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts'))
      newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * Whether the compiled output Node runs (`dist/` of every package built with tsc; `npm install`
 * builds them) is there and no older than its sources. The dashboard is not among them: the server
 * serves its build whichever way the server itself runs.
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
      return built.length > 0 && Math.min(...built) >= newestSource(join(PACKAGES, name, 'src'));
    });
}

/**
 * Node flags under which `svc` runs this tree as it is: none when the compiled output is current, as
 * after `npm install` (a process then starts in about half the time and a third of the CPU), and
 * otherwise the sources, so a test never runs a stale build.
 */
export const SVC_FLAGS: readonly string[] = builtOutputIsCurrent() ? [] : SOURCE_FLAGS;
