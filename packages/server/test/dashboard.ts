import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { loadConfig } from '../src/config.js';
import { signUserToken } from '../src/lib/jwt.js';
import { SVC_BIN, SVC_FLAGS } from './bin.js';
import { ADMIN_TOKEN, freshDatabase, JWT_SECRET, type TestDatabase } from './helpers.js';
import { freePort } from './ports.js';
import { REPO_ROOT, type StartedServer, startServerProcess } from './readme.js';

/**
 * What browser tests of the dashboard share: a real server process on a fresh store, Debian's
 * Chromium driven by playwright-core, organizations made through the API, login links, and where
 * screenshots go.
 */
export const CHROMIUM = '/usr/bin/chromium';

/** Polls until the expectation holds: pages on a busy machine can take seconds to render. */
export const eventually = <T>(read: () => T | Promise<T>) => expect.poll(read, { timeout: 20_000 });

/**
 * Runs `run` while `page` gets, for every request to `glob`, the API's error answer (`{error: {code,
 * message}}` with `status`): what the page shows when the service refuses or cannot answer.
 */
export async function whileFailing(
  page: Page,
  glob: string,
  { status, code, message }: { status: number; code: string; message: string },
  run: () => Promise<void>,
): Promise<void> {
  await page.route(glob, (route) =>
    route.fulfill({
      status,
      contentType: 'application/json',
      body: JSON.stringify({ error: { code, message } }),
    }),
  );
  try {
    await run();
  } finally {
    await page.unroute(glob);
  }
}

/**
 * Runs `run` while every request of `page` to `glob` is held, unanswered: what the page shows while
 * its reads are in flight. `run` gets `release`, which lets the held requests (and any later ones)
 * go on to the server; they go on at the latest once `run` is done.
 */
export async function whileHeld(
  page: Page,
  glob: string | RegExp,
  run: (release: () => void) => Promise<void>,
): Promise<void> {
  let release = () => {};
  const released = new Promise<void>((done) => {
    release = done;
  });
  await page.route(glob, async (route) => {
    await released;
    // The page may have gone elsewhere meanwhile: a request it dropped is no failure of the test.
    await route.fallback().catch(() => {});
  });
  try {
    await run(release);
  } finally {
    release();
    await page.unroute(glob);
  }
}

/** The element of `page` that has the focus, as `tag|accessible label or text`; BODY when none has. */
export const focusedOn = (page: Page) =>
  page.evaluate<string>(`(() => {
    const e = document.activeElement;
    if (!e || e === document.body) return 'BODY';
    return e.tagName.toLowerCase() + '|' + (e.getAttribute('aria-label') ?? e.textContent.slice(0, 40));
  })()`);
const DASHBOARD_DIST = join(REPO_ROOT, 'packages', 'dashboard', 'dist');

export interface Organization {
  id: string;
  name: string;
  apiKey: string;
  projectId: string;
  /** A user token of the organization's owner (for what the dashboard does not do itself). */
  userAuth: Record<string, string>;
}

export interface DashboardHarness {
  base: string;
  /** The server's database (tests that tamper with the stored history open it themselves). */
  db: TestDatabase;
  page: Page;
  context: BrowserContext;
  /** docs/screenshots with SVC_UPDATE_SCREENSHOTS=1, else a temporary directory removed at the end. */
  screenshots: string;
  call(
    path: string,
    init?: { method?: string; headers?: Record<string, string>; body?: unknown },
    // biome-ignore lint/suspicious/noExplicitAny: API answers are read loosely by the tests
  ): Promise<any>;
  /** A user's organization on the Team plan (approvals open) with a project and its API key. */
  organization(userId: string, slug: string): Promise<Organization>;
  loginLink(userId: string): Promise<string>;
  /** Signs `userId` in through a login link and waits for the first page (Approvals). */
  signIn(userId: string): Promise<void>;
  close(): Promise<void>;
}

/** A draft with one deny rule on `pay`, written and submitted by the organization's agent key; its id. */
export async function submittedDraft(h: DashboardHarness, org: Organization, name: string): Promise<string> {
  const headers = { 'x-service-api-key': org.apiKey };
  const created = await h.call('/v1/policy-drafts', {
    method: 'POST',
    headers,
    body: {
      name,
      projectId: org.projectId,
      createdByAgentId: 'policy-bot',
      rules: [{ id: 'cap', action: 'deny', tools: ['pay'], conditions: [], severity: 'high' }],
    },
  });
  const id = created.data.id as string;
  await h.call(`/v1/policy-drafts/${id}/submit`, { method: 'POST', headers });
  return id;
}

/**
 * Opens the dashboard page named `label` in the main navigation afresh, and waits for its heading:
 * from another page if it is open already, since pages read when they mount.
 */
export async function openPage(page: Page, label: string, heading: string): Promise<void> {
  const nav = page.getByRole('navigation', { name: 'Main' });
  if ((await nav.getByRole('link', { name: label }).getAttribute('aria-current')) === 'page')
    await nav.getByRole('link', { name: label === 'Approvals' ? 'Decisions' : 'Approvals' }).click();
  await nav.getByRole('link', { name: label }).click();
  await page.getByRole('heading', { name: heading, exact: true }).first().waitFor();
}

/**
 * Starts the server (with `extraEnv`, or what `extraEnv(base)` gives for its address) and the
 * browser; builds the dashboard first if it is not built.
 */
export async function startDashboard(
  extraEnv: Record<string, string> | ((base: string) => Promise<Record<string, string>>) = {},
): Promise<DashboardHarness> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  if (!existsSync(join(DASHBOARD_DIST, 'index.html'))) {
    execFileSync('npm', ['run', 'build', '-w', 'packages/dashboard'], { cwd: REPO_ROOT, stdio: 'ignore' });
  }
  const screenshots = process.env.SVC_UPDATE_SCREENSHOTS
    ? join(REPO_ROOT, 'docs', 'screenshots')
    : mkdtempSync(join(tmpdir(), 'svc-screenshots-'));
  mkdirSync(screenshots, { recursive: true });
  const db: TestDatabase = await freshDatabase();
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOST: '127.0.0.1',
    PORT: String(port),
    SVC_BASE_URL: base,
    SVC_DATABASE_URL: db.url,
    SVC_JWT_SECRET: JWT_SECRET,
    SVC_ADMIN_TOKEN: ADMIN_TOKEN,
    SVC_LOG_LEVEL: 'warn',
    ...(typeof extraEnv === 'function' ? await extraEnv(base) : extraEnv),
  };
  if (db.url.startsWith('sqlite:'))
    mkdirSync(db.url.slice('sqlite:'.length, db.url.lastIndexOf('/')), { recursive: true });
  const command = ['node', ...SVC_FLAGS, SVC_BIN, 'serve'].map((a) => `'${a}'`).join(' ');
  let server: StartedServer | undefined;
  let context: BrowserContext | undefined;
  const profile = mkdtempSync(join(tmpdir(), 'svc-chromium-'));
  // What the pages' Content-Security-Policy refused: the pages must work under it, so any is a failure.
  const refused: string[] = [];
  const close = async () => {
    await context?.close();
    await server?.stop();
    await db.drop();
    rmSync(profile, { recursive: true, force: true });
    if (!process.env.SVC_UPDATE_SCREENSHOTS) rmSync(screenshots, { recursive: true, force: true });
    if (refused.length > 0) throw new Error(`the Content-Security-Policy refused:\n${refused.join('\n')}`);
  };
  try {
    server = await startServerProcess(command, env, base, 60_000);
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
  } catch (err) {
    await close();
    throw err;
  }
  context.on('console', (m) => {
    if (m.text().includes('Content Security Policy')) refused.push(m.text());
  });
  const page = context.pages()[0] ?? (await context.newPage());

  async function call(
    path: string,
    init: { method?: string; headers?: Record<string, string>; body?: unknown } = {},
  ) {
    const res = await fetch(`${base}${path}`, {
      method: init.method ?? 'GET',
      headers: {
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...init.headers,
      },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path} answered ${res.status}: ${text}`);
    return text ? JSON.parse(text) : null;
  }

  async function organization(userId: string, slug: string): Promise<Organization> {
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
    return {
      id: org._id,
      name: org.name,
      apiKey: project.apiKey,
      projectId: project._id,
      userAuth: { ...auth, 'x-organization-id': org._id },
    };
  }

  const loginLink = (userId: string): Promise<string> =>
    new Promise((done, fail) =>
      execFile(
        process.execPath,
        [...SVC_FLAGS, SVC_BIN, 'login-link', '--sub', userId],
        { cwd: REPO_ROOT, env },
        (err, stdout) => (err ? fail(err) : done(stdout.trim())),
      ),
    );

  const signIn = async (userId: string): Promise<void> => {
    await page.goto(await loginLink(userId));
    await page.getByRole('heading', { name: 'Pending approvals' }).waitFor();
  };
  return { base, db, page, context, screenshots, call, organization, loginLink, signIn, close };
}
