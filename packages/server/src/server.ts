import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { settlesWithin } from './lib/deadline.js';
import { openStore, type PostgresTimeouts, type Store } from './storage/db.js';
import { migrateToLatest } from './storage/migrate.js';
import { claimStore, type OwnerLog, type StoreOwner, type StoreOwnershipLostError } from './storage/owner.js';

/**
 * How long a graceful stop may take: in-flight requests, the commits of queued decisions, the final
 * checkpoint, closing Redis and the database. A dependency that went away mid-stop (a partition)
 * would otherwise hold the process until it comes back. Below the 30 s that orchestrators commonly
 * give before a hard kill (Kubernetes' default terminationGracePeriodSeconds), so the process can
 * still say what it was waiting for.
 */
export const STOP_TIMEOUT_MS = 25_000;

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  /**
   * Drains in-flight requests, commits what they queued, then closes Redis and the store. Rejects if
   * that takes longer than the stop deadline, naming what it was still waiting for (the caller exits
   * non-zero: nothing answered is lost, every acknowledged decision is committed before its answer).
   */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Default STOP_TIMEOUT_MS. */
  stopTimeoutMs?: number;
  /** Overrides of the serving store's PostgreSQL timeouts (SERVE_TIMEOUTS; tests). */
  timeouts?: Partial<PostgresTimeouts>;
  /**
   * Embedded store in a file: another process took it over while this one served (this one's
   * heartbeat went stale, a frozen process say; storage/owner.ts). The error is logged already.
   * Default: stop() (`svc serve` stops and exits 1).
   */
  onOwnershipLost?: (err: StoreOwnershipLostError) => void;
  /** How often the claim on an embedded store is refreshed (default HEARTBEAT_MS; tests). */
  heartbeatMs?: number;
}

/** Before the application (and its logger) exists: one line on stderr. */
const startLog: OwnerLog = {
  warn: (_obj, msg) => console.error(`svc: ${msg}`),
  error: (obj, msg) => {
    const err = (obj as { err?: unknown }).err;
    console.error(`svc: ${msg}${err instanceof Error ? `: ${err.message}` : ''}`);
  },
};

/**
 * Applies pending migrations. On PostgreSQL through a store of their own, whose statements are not
 * bounded as the serving ones are (db.ts): a migration may run for minutes.
 */
async function migrate(config: Config, store: Store, timeouts: StartOptions['timeouts']): Promise<void> {
  if (store.dialect !== 'postgres') {
    await migrateToLatest(store);
    return;
  }
  const migrator = openStore(config.databaseUrl, {
    purpose: 'command',
    ...(timeouts?.connectMs !== undefined ? { timeouts: { connectMs: timeouts.connectMs } } : {}),
  });
  try {
    await migrateToLatest(migrator);
  } finally {
    await migrator.close();
  }
}

/**
 * Opens the store, claims it (an embedded store in a file: one serving process, storage/owner.ts),
 * migrates, listens. stop() drains in-flight requests, then releases the claim and closes the store.
 * A failure on the way closes whatever was opened before it is rethrown.
 */
export async function startServer(config: Config, options: StartOptions = {}): Promise<RunningServer> {
  const store = openStore(config.databaseUrl, {
    purpose: 'serve',
    ...(options.timeouts ? { timeouts: options.timeouts } : {}),
  });
  // Until the application (and its logger) exists; set once it serves. Taken over before it serves,
  // the start fails instead (owner.confirm(), owner.lostError).
  let log: OwnerLog = startLog;
  let lost: ((err: StoreOwnershipLostError) => void) | null = null;
  let owner: StoreOwner | null = null;
  const claim = (path: string) =>
    claimStore(path, {
      log: () => log,
      onLost: (err) => lost?.(err),
      ...(options.heartbeatMs !== undefined ? { heartbeatMs: options.heartbeatMs } : {}),
    });
  try {
    // Before migrating: a newer svc must not migrate the store an older one is serving.
    if (store.sqlitePath) owner = claim(store.sqlitePath);
    await migrate(config, store, options.timeouts);
    // A store without the claim's table (new, or last migrated by an older svc) is claimed once
    // migrated; of two processes that migrated it at once, one claims it, the other is refused.
    if (store.sqlitePath) {
      owner ??= claim(store.sqlitePath);
      if (!owner)
        throw new Error(`the SQLite database ${store.sqlitePath} has no serve_owner table once migrated`);
      owner.confirm();
    }
  } catch (err) {
    owner?.release();
    await store.close();
    throw err;
  }
  let app: FastifyInstance;
  try {
    ({ app } = await buildApp({ config, store }));
  } catch (err) {
    owner?.release();
    await store.close().catch(() => {});
    throw err;
  }
  log = app.log;
  const takeover = owner?.takeover();
  if (takeover) app.log.warn(takeover);
  // What a stop that overruns its deadline is still waiting for.
  let waitingFor = 'in-flight requests to finish';
  // Registered last: Fastify runs it first among the onClose hooks, once the requests have drained.
  app.addHook('onClose', async () => {
    waitingFor =
      'the application to close (commits of queued decisions, the final checkpoint, Redis connections)';
  });
  // Not an onClose hook: Fastify runs those last-registered first, and the app's own hooks (final
  // commits, the shutdown checkpoint) must still find the store open.
  const closeAll = () =>
    app.close().finally(() => {
      waitingFor = 'the database connections to close';
      // After the final commits: a restart is refused until then, and starts at once after.
      owner?.release();
      return store.close();
    });
  let url: string;
  try {
    url = await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    // The port is taken, the host is wrong…: close what buildApp opened (Redis, writer) and the store.
    await closeAll().catch(() => {});
    throw new Error(`cannot listen on HOST ${config.host}, PORT ${config.port}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const lostWhileStarting = owner?.lostError;
  if (lostWhileStarting) {
    // Taken over while the application started (its heartbeat could tell nobody yet).
    await closeAll().catch(() => {});
    throw lostWhileStarting;
  }
  const stopTimeoutMs = options.stopTimeoutMs ?? STOP_TIMEOUT_MS;
  const bounded = async () => {
    if (await settlesWithin(closeAll(), stopTimeoutMs)) return;
    let open = '';
    if (waitingFor.startsWith('in-flight')) {
      const connections = await new Promise<number>((r) =>
        app.server.getConnections((err, n) => r(err ? -1 : n)),
      );
      if (connections >= 0) open = ` (${connections} client connection(s) still open)`;
    }
    throw new Error(
      `graceful stop did not finish within ${stopTimeoutMs} ms: still waiting for ${waitingFor}${open}`,
    );
  };
  let stopping: Promise<void> | null = null;
  const running: RunningServer = {
    app,
    url,
    stop: () => {
      stopping ??= bounded();
      return stopping;
    },
  };
  lost = (err) => {
    app.log.error({ err }, err.message);
    if (options.onOwnershipLost) options.onOwnershipLost(err);
    else running.stop().catch(() => {});
  };
  return running;
}
