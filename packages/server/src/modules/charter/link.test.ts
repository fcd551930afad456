import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader } from '../../../test/helpers.js';

let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-dashboard-'));
  writeFileSync(join(dir, 'index.html'), '<!doctype html><title>dash</title>');
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
});
const t = useTestApp({}, () => ({ dashboardDir: dir }));

async function cookieOf(userId: string): Promise<string> {
  const link = new URL((await t.ctx.sessions.createLoginLink(userId, 900)).url);
  const res = await t.inject({ method: 'GET', url: link.pathname + link.search });
  return String(res.headers['set-cookie']).split(';')[0]!;
}

describe('GET /charter/verify/:id with the dashboard built', () => {
  it('answers a signed-in person the dashboard, anyone else the plain summary, a wrong secret 404', async () => {
    const tenant = await createTenant(t);
    await t.inject({
      method: 'POST',
      url: '/v1/tools/register',
      headers: keyHeader(tenant.apiKey),
      payload: { tools: [{ name: 'send_payment', parameters: [{ name: 'amount', type: 'number' }] }] },
    });
    const res = await t.inject({
      method: 'POST',
      url: '/v1/charter/turn',
      headers: keyHeader(tenant.apiKey),
      payload: { message: 'Block send_payment over $1,000', mode: 'compile' },
    });
    const url = (res.json().verification.linkUrl as string).slice(t.config.baseUrl.length);

    const plain = await t.inject({ method: 'GET', url });
    expect(plain.statusCode).toBe(200);
    expect(plain.body).toContain('is at most 1000');
    expect(plain.headers.vary).toBe('cookie');
    // Its approve button (in the dashboard's page) must not be framed by another site.
    expect(plain.headers['x-frame-options']).toBe('DENY');
    expect(plain.headers['content-security-policy']).toContain("frame-ancestors 'none'");

    const cookie = await cookieOf('alice');
    const page = await t.inject({ method: 'GET', url, headers: { cookie } });
    expect(page.statusCode).toBe(200);
    expect(page.body).toBe('<!doctype html><title>dash</title>');
    expect(page.headers['cache-control']).toBe('no-store');
    expect(page.headers['x-frame-options']).toBe('DENY');

    // A cookie that opens no session is anyone else.
    const stale = await t.inject({ method: 'GET', url, headers: { cookie: 'svc_session=nope' } });
    expect(stale.body).toContain('is at most 1000');
    const wrong = await t.inject({
      method: 'GET',
      url: url.replace(/token=.*/, 'token=x'),
      headers: { cookie },
    });
    expect(wrong.statusCode).toBe(404);
  });
});
