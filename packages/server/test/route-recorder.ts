import type { FastifyInstance, RouteOptions } from 'fastify';

/** Every route the apps built in this module graph registered, as Fastify handed it to onRoute. */
export const registered: RouteOptions[] = [];

/**
 * The `vi.mock('fastify', …)` factory of a test that needs every route of the app: Fastify as it is,
 * but each instance records its routes in `registered`. The test file must have a module graph of
 * its own (vitest.config.ts, `ownGraph`): in the shared process Fastify is already loaded, unmocked.
 */
export async function recordingFastify(importOriginal: () => Promise<typeof import('fastify')>) {
  const actual = await importOriginal();
  const create = ((opts?: object) => {
    const app = (actual.default as unknown as (o?: object) => FastifyInstance)(opts);
    app.addHook('onRoute', (route) => {
      registered.push(route);
    });
    return app;
  }) as unknown as typeof actual.default;
  return { ...actual, default: create };
}
