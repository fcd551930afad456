import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The `svc` command. */
export const SVC_BIN = join(import.meta.dirname, '..', 'bin', 'svc.js');

/** Node flags that load this repository's TypeScript sources: tsx, and the packages' `@svc/source` exports. */
export const SOURCE_FLAGS = ['--conditions=@svc/source', '--import', 'tsx'];

const PACKAGES = join(import.meta.dirname, '..', '..');

/** Modification times of the files under `dir`, but tests. */
function mtimes(dir: string, times: number[] = []): number[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) mtimes(path, times);
    else if (!entry.name.endsWith('.test.ts')) times.push(statSync(path).mtimeMs);
  }
  return times;
}

/**
 * Whether the compiled output Node runs (`dist/` of every package built with tsc; `npm install`
 * builds them) is there and no file of it older than the sources and build settings. The dashboard
 * is not among them: the server serves its build whichever way the server itself runs. Anything
 * that cannot be read (a file gone while it is looked at) counts as outdated, and so does a `dist/`
 * holding files an older build left (a fresh `npm run build` after removing `dist/` clears them).
 */
function builtOutputIsCurrent(): boolean {
  try {
    const settings = [join(PACKAGES, '..', 'tsconfig.build.json'), join(PACKAGES, '..', 'tsconfig.json')];
    return readdirSync(PACKAGES)
      .filter((name) => existsSync(join(PACKAGES, name, 'tsconfig.build.json')))
      .every((name) => {
        const built = mtimes(join(PACKAGES, name, 'dist'));
        const sources = [
          ...mtimes(join(PACKAGES, name, 'src')),
          ...[...settings, join(PACKAGES, name, 'tsconfig.build.json')].map((f) => statSync(f).mtimeMs),
        ];
        return built.length > 0 && Math.min(...built) >= Math.max(...sources);
      });
  } catch {
    return false;
  }
}

/**
 * Node flags under which `svc` runs this tree as it is: none when the compiled output is current, as
 * after `npm install` (a process then starts in about half the time and a third of the CPU), and
 * otherwise the sources, so a test never runs a stale build.
 */
export const SVC_FLAGS: readonly string[] = builtOutputIsCurrent() ? [] : SOURCE_FLAGS;
