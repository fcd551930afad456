import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { signUserToken } from '../src/lib/jwt.js';
import { SOURCE_FLAGS, SVC_BIN } from './bin.js';
import { ADMIN_TOKEN, freshDatabase, JWT_SECRET, type TestDatabase } from './helpers.js';
import { freePort, REPO_ROOT, type StartedServer, startServerProcess } from './readme.js';

/**
 * The dashboard in a real browser (Debian's Chromium driven by playwright-core) against a real server
 * process on a fresh store: sign-in by link, a live approval approved by a click, organization
 * isolation, and CSRF refusal. Screenshots of the pages go to docs/screenshots/.
 */
const CHROMIUM = '/usr/bin/chromium';
const DASHBOARD_DIST = join(REPO_ROOT, 'packages', 'dashboard', 'dist');
/**
 * The committed screenshots are refreshed with SVC_UPDATE_SCREENSHOTS=1; otherwise they are still taken
 * (the pages render at both widths) but kept out of the tree, which every run would otherwise change.
 */
const SCREENSHOTS = process.env.SVC_UPDATE_SCREENSHOTS
  ? join(REPO_ROOT, 'docs', 'screenshots')
  : mkdtempSync(join(tmpdir(), 'svc-screenshots-'));

let db: TestDatabase;
let server: StartedServer;
let base: string;
let env: NodeJS.ProcessEnv;
let profile: string;
let context: BrowserContext;
let page: Page;

async function call(
  path: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown },
) {
  const res = await fetch(`${base}${path}`, {
    method: init.method ?? 'GET',
    headers: { ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}), ...init.headers },
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path} answered ${res.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A user's organization (Team plan, so approvals open) with a project and its API key. */
async function organization(userId: string, slug: string) {
  const token = await signUserToken(JWT_SECRET, userId, 3600, loadConfig(env));
  const auth = { authorization: `Bearer ${token}` };
  const org = await call('/v1/organizations', {
    method: 'POST',
    headers: auth,
    body: { name: `Org ${slug}`, slug },
  });
  const project = await call('/v1/projects', {
    method: 'POST',
    headers: auth,
    body: { organizationId: org._id, name: 'Main' },
  });
  await call(`/v1/admin/organizations/${org._id}`, {
    method: 'PATCH',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    body: { tier: 'team' },
  });
  return { id: org._id as string, name: org.name as string, apiKey: project.apiKey as string };
}

function loginLink(userId: string): Promise<string> {
  return new Promise((done, fail) =>
    execFile(
      process.execPath,
      [...SOURCE_FLAGS, SVC_BIN, 'login-link', '--sub', userId],
      { cwd: REPO_ROOT, env },
      (err, stdout) => (err ? fail(err) : done(stdout.trim())),
    ),
  );
}

const validate = (apiKey: string, args: Record<string, unknown>, ctx?: Record<string, unknown>) =>
  call('/v1/tools/validate', {
    method: 'POST',
    headers: { 'x-service-api-key': apiKey },
    body: { tool_name: 'wire', arguments: args, ...(ctx ? { context: ctx } : {}) },
  });

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  if (!existsSync(join(DASHBOARD_DIST, 'index.html'))) {
    // npm install builds it; a tree where only the sources changed builds it here.
    execFileSync('npm', ['run', 'build', '-w', 'packages/dashboard'], { cwd: REPO_ROOT, stdio: 'ignore' });
  }
  db = await freshDatabase();
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  env = {
    ...process.env,
    HOST: '127.0.0.1',
    PORT: String(port),
    SVC_BASE_URL: base,
    SVC_DATABASE_URL: db.url,
    SVC_JWT_SECRET: JWT_SECRET,
    SVC_ADMIN_TOKEN: ADMIN_TOKEN,
    SVC_LOG_LEVEL: 'warn',
  };
  if (db.url.startsWith('sqlite:'))
    mkdirSync(db.url.slice('sqlite:'.length, db.url.lastIndexOf('/')), { recursive: true });
  const command = ['node', ...SOURCE_FLAGS, SVC_BIN, 'serve'].map((a) => `'${a}'`).join(' ');
  server = await startServerProcess(command, env, base, 60_000);
  profile = mkdtempSync(join(tmpdir(), 'svc-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 800 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  mkdirSync(SCREENSHOTS, { recursive: true });
}, 120_000);

afterAll(async () => {
  await context?.close();
  await server?.stop();
  await db?.drop();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (!process.env.SVC_UPDATE_SCREENSHOTS) rmSync(SCREENSHOTS, { recursive: true, force: true });
});

describe('the dashboard in a browser', () => {
  it('signs in by link, shows an escalated call live, approves it by a click, and keeps organizations apart', async () => {
    const main = await organization('alice', 'alice-main');
    const side = await organization('alice', 'alice-side');
    const other = await organization('mallory', 'mallory-org');
    await call('/v1/policies', {
      method: 'POST',
      headers: { 'x-service-api-key': main.apiKey },
      body: {
        toolName: 'wire',
        constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      },
    });

    // Signed out: the landing page says how to get a link.
    await page.goto(base);
    await expect.poll(() => page.getByRole('heading', { name: 'Sign in to svc' }).isVisible()).toBe(true);
    await page.screenshot({ path: join(SCREENSHOTS, 'sign-in.png') });

    await page.goto(await loginLink('alice'));
    await expect.poll(() => page.getByRole('heading', { name: 'Pending approvals' }).isVisible()).toBe(true);
    await page.getByLabel('Organization').selectOption(main.id);
    // Connected to the event stream: what follows arrives live, well before the fallback poll.
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Live');

    const escalated = await validate(
      main.apiKey,
      { amount: 50, to: 'acct-7' },
      { agent_id: 'billing-bot', session_id: 's-42' },
    );
    expect(escalated.decision).toBe('require_approval');
    const id = escalated.approval_id as string;
    const card = page.locator(`li[data-approval-id="${id}"]`);
    await card.waitFor({ timeout: 5_000 });
    expect(await card.textContent()).toMatch(/acct-7.*Agent billing-bot · Session s-42/s);
    const second = (await validate(main.apiKey, { amount: 70, to: 'acct-9' })).approval_id as string;
    await page.locator(`li[data-approval-id="${second}"]`).waitFor({ timeout: 5_000 });
    await page.screenshot({ path: join(SCREENSHOTS, 'approvals.png') });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(SCREENSHOTS, 'approvals-narrow.png') });
    await page.setViewportSize({ width: 1280, height: 800 });

    // A write with the cookie but without the CSRF token is refused and changes nothing.
    const forged = await page.evaluate(
      async ({ approvalId, orgId }) => {
        const res = await fetch(`/v1/approvals/${approvalId}/resolve`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-organization-id': orgId },
          body: JSON.stringify({ action: 'approve' }),
        });
        return { status: res.status, body: (await res.json()) as { error: { code: string } } };
      },
      { approvalId: id, orgId: main.id },
    );
    expect(forged.status).toBe(403);
    expect(forged.body.error.code).toBe('csrf_failed');

    await page.getByRole('button', { name: `Approve wire ${id}` }).click();
    const row = page.locator(`tr[data-approval-id="${id}"]`);
    await row.waitFor({ timeout: 5_000 });
    expect(await row.textContent()).toMatch(/approved.*alice \(you\)/);
    expect(await card.count()).toBe(0);
    // The waiting agent presents the approval and proceeds.
    const retried = await validate(main.apiKey, { amount: 50, to: 'acct-7' }, { approval_id: id });
    expect(retried.decision).toBe('allow');

    // Several at once: select, then deny the selection (the batch route).
    const third = (await validate(main.apiKey, { amount: 90, to: 'acct-3' })).approval_id as string;
    await page.locator(`li[data-approval-id="${third}"]`).waitFor({ timeout: 5_000 });
    for (const a of [second, third])
      await page.locator(`li[data-approval-id="${a}"]`).getByRole('checkbox').check();
    await page.getByRole('button', { name: 'Deny selected (2)' }).click();
    for (const a of [second, third]) {
      await page.locator(`tr[data-approval-id="${a}"]`).waitFor({ timeout: 5_000 });
      expect(await page.locator(`tr[data-approval-id="${a}"]`).textContent()).toMatch(
        /denied.*alice \(you\)/,
      );
    }
    expect(await page.locator('li[data-approval-id]').count()).toBe(0);

    // Another organization of the same person shows nothing of the first.
    await page.getByLabel('Organization').selectOption(side.id);
    await expect.poll(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    expect(await page.locator(`[data-approval-id="${second}"]`).count()).toBe(0);
    expect(await page.locator(`[data-approval-id="${id}"]`).count()).toBe(0);

    // Sign out, then a person of another organization: none of it is shown or reachable.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await expect.poll(() => page.getByRole('heading', { name: 'Sign in to svc' }).isVisible()).toBe(true);
    await page.goto(await loginLink('mallory'));
    await expect.poll(() => page.getByRole('heading', { name: 'Pending approvals' }).isVisible()).toBe(true);
    const options = await page.getByLabel('Organization').locator('option').allTextContents();
    expect(options).toEqual([other.name]);
    await expect.poll(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    expect(await page.locator('[data-approval-id]').count()).toBe(0);
    const peek = await page.evaluate(async (orgId) => {
      const res = await fetch('/v1/approvals/pending', { headers: { 'x-organization-id': orgId } });
      return res.status;
    }, main.id);
    expect(peek).toBe(403);
    expect(side.id).not.toBe(main.id);
  }, 120_000);
});
