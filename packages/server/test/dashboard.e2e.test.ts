import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHarness, eventually, startDashboard } from './dashboard.js';

/**
 * The dashboard in a real browser (Debian's Chromium driven by playwright-core) against a real server
 * process on a fresh store: sign-in by link, a live approval approved by a click, organization
 * isolation, and CSRF refusal. Screenshots of the pages go to docs/screenshots/.
 */
let h: DashboardHarness;
let base: string;
let page: Page;
let SCREENSHOTS: string;
let call: DashboardHarness['call'];
let organization: DashboardHarness['organization'];
let loginLink: DashboardHarness['loginLink'];

const validate = (apiKey: string, args: Record<string, unknown>, ctx?: Record<string, unknown>) =>
  call('/v1/tools/validate', {
    method: 'POST',
    headers: { 'x-service-api-key': apiKey },
    body: { tool_name: 'wire', arguments: args, ...(ctx ? { context: ctx } : {}) },
  });

beforeAll(async () => {
  h = await startDashboard();
  ({ base, page, call, organization, loginLink } = h);
  SCREENSHOTS = h.screenshots;
}, 120_000);

afterAll(async () => {
  await h?.close();
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
    await eventually(() => page.getByRole('heading', { name: 'Sign in to svc' }).isVisible()).toBe(true);
    await page.screenshot({ path: join(SCREENSHOTS, 'sign-in.png') });
    await page.setViewportSize({ width: 390, height: 844 });
    // On a phone too: nothing widens the page beyond the screen.
    expect(await page.locator('html').evaluate((html) => html.scrollWidth)).toBeLessThanOrEqual(390);
    await page.screenshot({ path: join(SCREENSHOTS, 'sign-in-narrow.png') });
    await page.setViewportSize({ width: 1280, height: 800 });

    await page.goto(await loginLink('alice'));
    await eventually(() => page.getByRole('heading', { name: 'Pending approvals' }).isVisible()).toBe(true);
    await page.getByLabel('Organization').selectOption(main.id);
    // Connected to the event stream: what follows arrives live, well before the fallback poll.
    await eventually(() => page.getByRole('status').textContent()).toBe('Live');

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
    await eventually(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    expect(await page.locator(`[data-approval-id="${second}"]`).count()).toBe(0);
    expect(await page.locator(`[data-approval-id="${id}"]`).count()).toBe(0);

    // Sign out, then a person of another organization: none of it is shown or reachable.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await eventually(() => page.getByRole('heading', { name: 'Sign in to svc' }).isVisible()).toBe(true);
    await page.goto(await loginLink('mallory'));
    await eventually(() => page.getByRole('heading', { name: 'Pending approvals' }).isVisible()).toBe(true);
    const options = await page.getByLabel('Organization').locator('option').allTextContents();
    expect(options).toEqual([other.name]);
    await eventually(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    expect(await page.locator('[data-approval-id]').count()).toBe(0);
    const peek = await page.evaluate(async (orgId) => {
      const res = await fetch('/v1/approvals/pending', { headers: { 'x-organization-id': orgId } });
      return res.status;
    }, main.id);
    expect(peek).toBe(403);
    expect(side.id).not.toBe(main.id);
  }, 120_000);
});
