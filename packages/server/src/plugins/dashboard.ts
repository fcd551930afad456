import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { AppError } from '../lib/errors.js';
import { MAX_PARAM_LENGTH } from './errors.js';

/** packages/dashboard/dist, from src/plugins or dist/plugins alike. */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../../dashboard/dist', import.meta.url));

/** Paths that belong to the API: never answered with the dashboard's page. */
const API_PREFIXES = [
  '/v1',
  '/.well-known',
  '/openapi.json',
  '/docs',
  '/metrics',
  '/healthz',
  '/readyz',
  '/ws',
];

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

export function isApiPath(path: string): boolean {
  return API_PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));
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
      .header('x-content-type-options', 'nosniff')
      .send(asset.body);

  app.get('/*', { config: { auth: 'none' } }, async (req, reply) => {
    const path = req.url.split('?')[0]!;
    if (isApiPath(path)) {
      // With this catch-all in the router, a path parameter over the router's limit lands here
      // instead of raising the router's own error: answer as that error would.
      if (path.split('/').some((segment) => segment.length > MAX_PARAM_LENGTH)) {
        throw new AppError(
          'validation_failed',
          `A path parameter is longer than ${MAX_PARAM_LENGTH} characters`,
        );
      }
      return reply.callNotFound();
    }
    const asset = assets.get(path);
    // Vite names built assets by content hash: they may be cached for good.
    if (asset)
      return send(
        reply,
        asset,
        path.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      );
    if (extname(path) !== '') throw new AppError('not_found', `File ${path} not found`);
    return send(reply, index, 'no-cache');
  });
}
