import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { PAGE_HEADERS } from '../lib/page-headers.js';

/** packages/dashboard/dist, from src/plugins or dist/plugins alike. */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../../dashboard/dist', import.meta.url));

/** The dashboard's client routes: each (and everything under it) answers the page. */
export const CLIENT_ROUTES = [
  '/',
  '/approvals',
  '/decisions',
  '/policies',
  '/drafts',
  '/charter',
  '/budgets',
  '/settings',
];

/** The dashboard's index.html as built, or null when it is not built (the API only). */
export function dashboardIndex(dir: string): Buffer | null {
  const path = join(dir, 'index.html');
  return existsSync(path) ? readFileSync(path) : null;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/** Whether a route path is one the dashboard registers (its pages and built files). */
export function isDashboardRoute(path: string): boolean {
  return (
    path === '/index.html' ||
    path.startsWith('/assets/') ||
    CLIENT_ROUTES.some((p) => path === p || path === `${p}/*`)
  );
}

interface Asset {
  body: Buffer;
  type: string;
}

/** Every file of the build, read once: the build is small and never changes under a running server. */
function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else {
        const url = `/${relative(dir, path).split(sep).join('/')}`;
        assets.set(url, {
          body: readFileSync(path),
          type: TYPES[extname(name)] ?? 'application/octet-stream',
        });
      }
    }
  };
  walk(dir);
  return assets;
}

/**
 * Serves the single-page dashboard at `/`: its files as built, and index.html for any other GET
 * that is not an API path and names no file (client routes such as /approvals).
 */
export async function dashboardRoutes(app: FastifyInstance, { dir }: { dir: string }): Promise<void> {
  if (!existsSync(join(dir, 'index.html'))) {
    app.log.warn({ dir }, 'dashboard not built: serving the API only (run npm run build to build it)');
    return;
  }
  const assets = loadAssets(dir);
  const index = assets.get('/index.html')!;
  app.log.info({ dir, files: assets.size }, 'serving the dashboard at /');

  const send = (reply: FastifyReply, asset: Asset, cache: string) =>
    reply
      .type(asset.type)
      .header('cache-control', cache)
      .headers(asset === index ? PAGE_HEADERS : { 'x-content-type-options': 'nosniff' })
      .send(asset.body);

  // Only the dashboard's own paths are routed here, never a catch-all: API paths keep their own
  // not-found and error answers (envelopes, router limits) untouched.
  for (const [path, asset] of assets) {
    if (path === '/index.html') continue;
    const cache = path.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache';
    app.get(path, { config: { auth: 'none' }, schema: { hide: true } }, async (_req, reply) =>
      send(reply, asset, cache),
    );
  }
  for (const page of CLIENT_ROUTES) {
    for (const path of page === '/' ? ['/', '/index.html'] : [page, `${page}/*`]) {
      app.get(path, { config: { auth: 'none' }, schema: { hide: true } }, async (_req, reply) =>
        send(reply, index, 'no-cache'),
      );
    }
  }
}
