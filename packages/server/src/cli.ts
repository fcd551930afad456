import { parseArgs } from 'node:util';
import { loadConfig } from './config.js';
import { parseTtl, resolveJwtSecret, signUserToken } from './lib/jwt.js';
import { startServer } from './server.js';
import { openStore } from './storage/db.js';
import { migrateToLatest } from './storage/migrate.js';

const USAGE = `Usage: svc <command>

Commands:
  serve                          run the HTTP service (migrates the store first)
  migrate                        apply pending migrations and exit
  token --sub USER [--ttl 1h]    print a user JWT signed with the server's HS256 secret
  help                           show this help

Configuration comes from the environment (see README.md).`;

async function serve(): Promise<void> {
  const config = loadConfig();
  const server = await startServer(config);
  let signals = 0;
  const shutdown = (signal: string) => {
    signals++;
    if (signals > 1) process.exit(1);
    server.app.log.info({ signal }, 'draining in-flight requests');
    server.stop().then(
      () => process.exit(0),
      (err) => {
        server.app.log.error({ err }, 'error while shutting down');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

async function migrate(): Promise<void> {
  const store = openStore(loadConfig().databaseUrl);
  try {
    const applied = await migrateToLatest(store);
    console.log(applied.length ? `applied: ${applied.join(', ')}` : 'already up to date');
  } finally {
    await store.close();
  }
}

async function token(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { sub: { type: 'string' }, ttl: { type: 'string', default: '1h' } },
  });
  if (!values.sub) throw new Error('--sub USER is required');
  const config = loadConfig();
  if (!config.jwtSecret && config.jwtJwksUrl) {
    throw new Error('SVC_JWT_JWKS_URL is set: tokens come from your identity provider, not from svc token');
  }
  const store = openStore(config.databaseUrl);
  try {
    if (store.dialect === 'postgres') await migrateToLatest(store);
    const secret = await resolveJwtSecret(config, store);
    console.log(await signUserToken(secret!, values.sub, parseTtl(values.ttl ?? '1h'), config));
  } finally {
    await store.close();
  }
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      return serve();
    case 'migrate':
      return migrate();
    case 'token':
      return token(rest);
    case undefined:
    case 'help':
    case '--help':
      console.log(USAGE);
      return;
    default:
      console.error(`unknown command "${command}"\n\n${USAGE}`);
      process.exitCode = 2;
  }
}
