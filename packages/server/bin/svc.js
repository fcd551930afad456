#!/usr/bin/env node
// Loads the command through the package's own `exports`: plain node gets the compiled `dist/` (built by
// `npm install`); development and tests run the sources with `node --conditions=@svc/source --import tsx`.
process.setSourceMapsEnabled(true);
let cli;
try {
  cli = await import('@svc/server/cli');
} catch (err) {
  if (err?.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('/dist/')) {
    console.error('svc: the compiled output is missing; run `npm run build` (npm install runs it)');
    process.exit(1);
  }
  throw err;
}
await cli.main(process.argv.slice(2)).catch((err) => {
  console.error(`svc: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
