import { afterAll, beforeAll } from 'vitest';
import type { Config } from '../src/config.js';
import { createTestApp, type TestApp, type TestAppOptions } from './helpers.js';

/** A value, or a function giving it once earlier hooks have run (e.g. a fake server's address). */
type Lazy<T> = T | (() => T);
const resolve = <T>(value: Lazy<T>): T => (typeof value === 'function' ? (value as () => T)() : value);

/**
 * The fixture of every HTTP test: registers a `beforeAll` that builds an app on a fresh database and an
 * `afterAll` that tears it down, in the calling scope (a file or a `describe`), and returns a handle
 * that reads through to that app. Call it before the scope's own hooks, so they run after the app is
 * built and before it is closed (vitest runs `afterAll` hooks in reverse order). Arguments may be
 * functions, evaluated when the app is built, for values that earlier hooks create.
 */
export function useTestApp(
  overrides: Lazy<Partial<Config>> = {},
  options: Lazy<TestAppOptions> = {},
): TestApp {
  let current: TestApp | undefined;
  beforeAll(async () => {
    current = await createTestApp(resolve(overrides), resolve(options));
  });
  afterAll(async () => {
    await current?.close();
    current = undefined;
  });
  const live = (): TestApp => {
    if (!current)
      throw new Error('the test app exists only inside tests and hooks of the scope that uses it');
    return current;
  };
  return {
    get app() {
      return live().app;
    },
    get ctx() {
      return live().ctx;
    },
    get store() {
      return live().store;
    },
    get config() {
      return live().config;
    },
    get database() {
      return live().database;
    },
    get url() {
      return live().url;
    },
    close: () => live().close(),
    inject: (opts) => live().inject(opts),
    token: (userId) => live().token(userId),
  };
}
