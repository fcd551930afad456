import { join } from 'node:path';

/** The `svc` command. */
export const SVC_BIN = join(import.meta.dirname, '..', 'bin', 'svc.js');

/** Node flags that make `svc` run the TypeScript sources, so tests never run a stale build. */
export const SOURCE_FLAGS = ['--conditions=@svc/source', '--import', 'tsx'];
