import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { createServer, connect as tcpConnect } from 'node:net';
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../test/bin.js';
import { freshDatabase, JWT_SECRET, TEST_PG_URL, type TestDatabase } from '../test/helpers.js';
import { PausingProxy } from '../test/pausing-proxy.js';
import { organizationWithProject } from '../test/serve.js';
import { TEST_REDIS_URL, waitFor } from '../test/streams.js';
import { loadConfig } from './config.js';
import type { StoreOptions } from './storage/db.js';

const closed: string[] = [];

vi.mock('./storage/db.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('./storage/db.js')>();
  return {
    ...original,
    openStore: (url: string, options?: StoreOptions) => {
      const store = original.openStore(url, options);
      const close = store.close.bind(store);
      store.close = async () => {
        // PostgreSQL migrates on a store of its own (no statement timeout), closed before serving.
        closed.push(options?.purpose === 'serve' ? 'store' : 'migration store');
        await close();
      };
      return store;
    },
  };
});

const { startServer } = await import('./server.js');
const { openStore } = await import('./storage/db.js');

let database: TestDatabase | null = null;
afterEach(async () => {
  await database?.drop();
  database = null;
  closed.length = 0;
});

describe('startServer', () => {
  it('closes the store (and the app) when it cannot listen', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const port = (blocker.address() as AddressInfo).port;
    database = await freshDatabase();
    try {
      const config = {
        ...loadConfig({}),
        jwtSecret: JWT_SECRET,
        databaseUrl: database.url,
        logLevel: 'silent' as const,
        port,
        host: '127.0.0.1',
      };
      await expect(startServer(config)).rejects.toThrow(
        /^cannot listen on HOST 127\.0\.0\.1, PORT \d+: .*EADDRINUSE/,
      );
      expect(closed).toEqual(TEST_PG_URL ? ['migration store', 'store'] : ['store']);
    } finally {
      await new Promise((r) => blocker.close(r));
    }
  });

  it('stops cleanly once started', async () => {
    database = await freshDatabase();
    const config = {
      ...loadConfig({}),
      jwtSecret: JWT_SECRET,
      databaseUrl: database.url,
      logLevel: 'silent' as const,
      port: 0,
      host: '127.0.0.1',
    };
    const server = await startServer(config);
    // One decision before stopping: the shutdown checkpoint must still reach the store.
    const { apiKey } = await organizationWithProject(server, config);
    const validated = await server.app.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: { 'x-service-api-key': apiKey },
      payload: { tool_name: 'x', arguments: {} },
    });
    expect(validated.statusCode).toBe(200);
    await server.stop();
    expect(closed).toEqual(TEST_PG_URL ? ['migration store', 'store'] : ['store']);
    const store = openStore(database.url);
    try {
      const rows = await store.db.selectFrom('checkpoints').select('tree_size').execute();
      expect(rows.map((r) => Number(r.tree_size))).toEqual([1]);
    } finally {
      await store.close();
    }
  });
});

/** A config on a fresh database, listening on a free loopback port. */
async function testConfig(overrides: Partial<ReturnType<typeof loadConfig>> = {}) {
  database = await freshDatabase();
  return {
    ...loadConfig({}),
    jwtSecret: JWT_SECRET,
    databaseUrl: database.url,
    logLevel: 'silent' as const,
    port: 0,
    host: '127.0.0.1',
    ...overrides,
  };
}

/** Settles with what `p` gave, or with 'hung' if it has not settled within `ms`. */
const within = <T>(p: Promise<T>, ms: number) =>
  Promise.race([
    p.then(
      (value) => ({ value }),
      (error: unknown) => ({ error: error as Error }),
    ),
    new Promise<'hung'>((r) => setTimeout(() => r('hung'), ms)),
  ]);

describe('startServer, with a dependency away', () => {
  it('gives up a graceful stop at its deadline, naming what it was waiting for', async () => {
    const config = await testConfig();
    const server = await startServer(config, { stopTimeoutMs: 300 });
    const port = Number(new URL(server.url).port);
    // A request whose body never comes: in flight for as long as the client wants.
    const socket = tcpConnect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      'POST /v1/organizations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{',
    );
    await new Promise((r) => setTimeout(r, 100));
    try {
      const started = performance.now();
      const outcome = await within(server.stop(), 5000);
      expect(outcome).not.toBe('hung');
      expect((outcome as { error?: Error }).error?.message).toBe(
        'graceful stop did not finish within 300 ms: still waiting for in-flight requests to finish (1 client connection(s) still open)',
      );
      expect(performance.now() - started).toBeLessThan(2000);
    } finally {
      socket.destroy();
      // The stop goes on in the background once the request is gone; the next test starts after it.
      await waitFor(() => closed.includes('store'), 'the store closed');
    }
  });

  it('fails to start within the connect timeout when PostgreSQL does not answer', async () => {
    // Accepts connections and never answers (as a server behind a partition would).
    const silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const port = (silent.address() as AddressInfo).port;
    try {
      const config = await testConfig({ databaseUrl: `postgres://svc:hunter2@127.0.0.1:${port}/svc` });
      const outcome = await within(startServer(config, { timeouts: { connectMs: 300 } }), 5000);
      expect(outcome).not.toBe('hung');
      expect((outcome as { error?: Error }).error?.message).toMatch(
        new RegExp(
          `^cannot connect to the database at SVC_DATABASE_URL \\(postgres://svc@127\\.0\\.0\\.1:${port}/svc\\): no connection within 300 ms`,
        ),
      );
      expect(closed).toEqual(['migration store', 'store']);
    } finally {
      silent.close();
    }
  });

  it('fails to start when Redis accepts the connection and never answers', async () => {
    const proxy = await PausingProxy.start(Number(new URL(TEST_REDIS_URL).port || 6379), { paused: true });
    try {
      const config = await testConfig({ redisUrl: proxy.url(TEST_REDIS_URL) });
      const outcome = await within(startServer(config), 15_000);
      expect(outcome).not.toBe('hung');
      expect((outcome as { error?: Error }).error?.message).toMatch(
        /^cannot connect to Redis at SVC_REDIS_URL \(redis:\/\/127\.0\.0\.1:\d+.*\): no answer within (2000|5000) ms$/,
      );
      expect(closed).toContain('store');
    } finally {
      await proxy.close();
    }
  });
});

describe('svc serve', () => {
  it('refuses a Redis database index out of range with one clear line, no ioredis stack traces', async () => {
    database = await freshDatabase();
    const url = new URL(TEST_REDIS_URL);
    url.pathname = '/99';
    const child = spawn(process.execPath, [...SVC_FLAGS, SVC_BIN, 'serve'], {
      env: {
        PATH: process.env.PATH,
        SVC_DATABASE_URL: database.url,
        SVC_REDIS_URL: url.toString(),
        SVC_JWT_SECRET: JWT_SECRET,
        SVC_LOG_LEVEL: 'silent',
        PORT: '0',
      },
    });
    // Whatever happens to the test (a timeout included), the process does not outlive it.
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    expect(stderr).toBe(
      `svc: cannot connect to Redis at SVC_REDIS_URL (${url.toString()}): ERR DB index is out of range\n`,
    );
    expect(code).toBe(1);
  });
});
