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

/**
 * Opens the store, migrates, listens. stop() drains in-flight requests, then closes the store. A
 * failure on the way closes whatever was opened before it is rethrown.
 */
export async function startServer(config: Config): Promise<RunningServer> {
  const store = openStore(config.databaseUrl);
  try {
    await migrateToLatest(store);
  } catch (err) {
    await store.close();
    throw err;
  }
  let app: FastifyInstance;
  try {
    ({ app } = await buildApp({ config, store }));
  } catch (err) {
    await store.close().catch(() => {});
    throw err;
  }
  // Not an onClose hook: Fastify runs those last-registered first, and the app's own hooks (final
  // commits, the shutdown checkpoint) must still find the store open.
  const closeAll = () => app.close().finally(() => store.close());
  let url: string;
  try {
    url = await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    // The port is taken, the host is wrong…: close what buildApp opened (Redis, writer) and the store.
    await closeAll().catch(() => {});
    throw err;
  }
  let stopping: Promise<void> | null = null;
  return {
    app,
    url,
    stop: () => {
      stopping ??= closeAll();
      return stopping;
    },
  };
}
