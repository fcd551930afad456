import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { freshDatabase, JWT_SECRET, type TestDatabase } from '../test/helpers.js';
import { loadConfig } from './config.js';
import { signUserToken } from './lib/jwt.js';

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
    // One decision before stopping: the shutdown checkpoint must still reach the store.
    const token = await signUserToken(JWT_SECRET, 'stopper', 600, config);
    const auth = { authorization: `Bearer ${token}` };
    const org = await server.app.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: auth,
      payload: { name: 'S', slug: 'stop-org' },
    });
    const project = await server.app.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: auth,
      payload: { organizationId: org.json()._id, name: 'p' },
    });
    const validated = await server.app.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: { 'x-service-api-key': project.json().apiKey },
      payload: { tool_name: 'x', arguments: {} },
    });
    expect(validated.statusCode).toBe(200);
    await server.stop();
    expect(closed).toEqual(['store']);
    const store = openStore(database.url);
    try {
      const rows = await store.db.selectFrom('checkpoints').select('tree_size').execute();
      expect(rows.map((r) => Number(r.tree_size))).toEqual([1]);
    } finally {
      await store.close();
    }
  });
});
