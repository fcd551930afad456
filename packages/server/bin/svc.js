#!/usr/bin/env node
// Runs the TypeScript sources directly through tsx's loader: no build step, no stale output.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
await main(process.argv.slice(2)).catch((err) => {
  console.error(`svc: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
