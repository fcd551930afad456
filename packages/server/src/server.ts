import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { openStore } from './storage/db.js';
import { migrateToLatest } from './storage/migrate.js';

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  stop(): Promise<void>;
}

/** Opens the store, migrates, listens. stop() drains in-flight requests, then closes the store. */
export async function startServer(config: Config): Promise<RunningServer> {
  const store = openStore(config.databaseUrl);
  try {
    await migrateToLatest(store);
  } catch (err) {
    await store.close();
    throw err;
  }
  const { app } = await buildApp({ config, store });
  app.addHook('onClose', async () => {
    await store.close();
  });
  const url = await app.listen({ port: config.port, host: config.host });
  let stopping: Promise<void> | null = null;
  return {
    app,
    url,
    stop: () => {
      stopping ??= app.close();
      return stopping;
    },
  };
}
