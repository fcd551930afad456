import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { expectError, withTestApp } from '../../test/helpers.js';

let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-dashboard-'));
  mkdirSync(join(dir, 'assets'));
  writeFileSync(join(dir, 'index.html'), '<!doctype html><title>dash</title>');
  writeFileSync(join(dir, 'assets', 'app-1234.js'), 'console.log(1)');
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
});
const t = useTestApp({}, () => ({ dashboardDir: dir }));

describe('the dashboard', () => {
  it('is served at / with its assets', async () => {
    const page = await t.inject({ method: 'GET', url: '/' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.body).toContain('<title>dash</title>');
    const asset = await t.inject({ method: 'GET', url: '/assets/app-1234.js' });
    expect(asset.headers['content-type']).toMatch(/^text\/javascript/);
    expect(asset.headers['cache-control']).toContain('immutable');
  });

  it('answers client routes with its page, but never API paths or missing files', async () => {
    for (const url of ['/', '/approvals', '/approvals/abc?x=1', '/settings/keys']) {
      const res = await t.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(200);
      expect(res.body).toContain('<title>dash</title>');
      // Its buttons approve: no other site may frame it; only its own scripts run.
      expect(res.headers['x-frame-options'], url).toBe('DENY');
      expect(res.headers['content-security-policy'], url).toContain("frame-ancestors 'none'");
      expect(res.headers['content-security-policy'], url).toContain("script-src 'self'");
    }
    for (const url of [
      '/v1/nope',
      '/v1',
      '/.well-known/nope',
      '/ws/x',
      '/healthz/x',
      '/nope',
      '/assets/missing.js',
      '/favicon.ico',
    ]) {
      expectError(await t.inject({ method: 'GET', url }), 404, 'not_found');
    }
    expectError(await t.inject({ method: 'POST', url: '/approvals' }), 404, 'not_found');
    expect((await t.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it('is left out when not built: the API still serves', async () => {
    await withTestApp({}, { dashboardDir: join(dir, 'absent') }, async (bare) => {
      expectError(await bare.inject({ method: 'GET', url: '/' }), 404, 'not_found');
      expect((await bare.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    });
  });
});
