import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { freshDatabase, JWT_SECRET, type TestDatabase } from '../test/helpers.js';
import { loadConfig } from './config.js';

const closed: string[] = [];

vi.mock('./storage/db.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('./storage/db.js')>();
  return {
    ...original,
    openStore: (url: string) => {
      const store = original.openStore(url);
      const close = store.close.bind(store);
      store.close = async () => {
        closed.push('store');
        await close();
      };
      return store;
    },
  };
});

const { startServer } = await import('./server.js');

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
      await expect(startServer(config)).rejects.toThrow(/EADDRINUSE|address already in use/);
      expect(closed).toEqual(['store']);
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
    await server.stop();
    expect(closed).toEqual(['store']);
  });
});
