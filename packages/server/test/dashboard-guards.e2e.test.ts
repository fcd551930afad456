import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DashboardHarness,
  eventually,
  type Organization,
  openPage,
  startDashboard,
  submittedDraft,
  whileFailing,
} from './dashboard.js';

/**
 * A click acts only on what the person clicked and read, names an agent chose are shown as they are
 * wherever they appear, and a sign-out that did not happen is not shown as one. A real server process
 * and Debian's Chromium; the tests build on each other, in order.
 */
let h: DashboardHarness;
let page: Page;
let alice: Organization;

const key = () => ({ 'x-service-api-key': alice.apiKey });
const openApproval = (toolName: string, args: Record<string, unknown>) =>
  h.call('/v1/approvals', { method: 'POST', headers: key(), body: { toolName, arguments: args } });
const open = (label: string, heading: string) => openPage(page, label, heading);
/** Presses the mouse at the middle of `selector` as the `count`th click of a run (2: a double click's second). */
const press = async (selector: string, count: number) => {
  const box = await page.locator(selector).first().boundingBox();
  if (!box) throw new Error(`${selector} is not shown`);
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.down({ clickCount: count });
  await page.mouse.up({ clickCount: count });
};
const draft = (name: string) => submittedDraft(h, alice, name);

beforeAll(async () => {
  h = await startDashboard();
  page = h.page;
  alice = await h.organization('alice', 'alice-guards');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the dashboard acts on what was clicked and read, and shows agent-chosen names as they are', () => {
  it("ignores a double click's second click, which lands on the card that took the resolved one's place", async () => {
    await openApproval('pay_vendor', { amount: 1 });
    await openApproval('pay_vendor', { amount: 2 });
    await open('Approvals', 'Pending approvals');
    await eventually(() => page.locator('ul.cards > li').count()).toBe(2);
    const [top, next] = await page
      .locator('ul.cards > li')
      .evaluateAll((cards) => cards.map((c) => c.getAttribute('data-approval-id') ?? ''));
    const approve = (id: string | undefined) => `li[data-approval-id="${id}"] .actions button:not(.deny)`;

    // The first click of a double click approves the card it is on.
    await press(approve(top), 1);
    await eventually(() => page.locator(`li[data-approval-id="${top}"]`).count()).toBe(0);
    // The next card moved up and its Approve is enabled again: the second click lands on it.
    await eventually(() => page.locator(approve(next)).isEnabled()).toBe(true);
    const answer = page.waitForResponse((r) => r.url().endsWith(`/v1/approvals/${next}/resolve`));
    await press(approve(next), 2);
    // Nothing was sent for it: its buttons are not waiting, and the first request for it is this deny.
    await page.locator(`li[data-approval-id="${next}"] .actions button.deny`).click({ timeout: 10_000 });
    expect((await answer).request().postDataJSON()).toEqual({ action: 'deny' });
    expect((await h.call(`/v1/approvals/${top}`, { headers: key() })).status).toBe('approved');
    expect((await h.call(`/v1/approvals/${next}`, { headers: key() })).status).toBe('denied');
  }, 120_000);

  it("ignores a double click's second click on a draft's buttons", async () => {
    const first = await draft('First draft');
    const second = await draft('Second draft');
    await open('Drafts', 'Policy drafts');
    const button = (id: string, name: string) => `li[data-draft-id="${id}"] button:text-is("${name}")`;
    await page.locator(button(second, 'Approve draft')).waitFor();

    await press(button(first, 'Approve draft'), 1);
    await eventually(
      async () => (await h.call(`/v1/policy-drafts/${first}`, { headers: key() })).data.status,
    ).toBe('approved');
    await page
      .locator(`li[data-draft-id="${first}"] button:text-is("Approve draft")`)
      .waitFor({ state: 'detached' });
    await press(button(second, 'Approve draft'), 2);
    // Not busy with an approval: replaying it works at once, and it still waits for review.
    await page.locator(button(second, 'Replay against decisions')).click({ timeout: 10_000 });
    await page.locator(`li[data-draft-id="${second}"] [data-replay]`).waitFor();
    expect((await h.call(`/v1/policy-drafts/${second}`, { headers: key() })).data.status).toBe(
      'pending_review',
    );
  }, 120_000);

  it('shows a replay beside the rules it replayed, also when an agent edited them after the page read them', async () => {
    const rules = (value: number) => [
      {
        id: 'cap',
        action: 'allow',
        tools: ['pay'],
        conditions: [{ field: 'arguments.amount', operator: 'less_than_or_equal', value }],
        severity: 'high',
      },
    ];
    const created = await h.call('/v1/policy-drafts', {
      method: 'POST',
      headers: key(),
      body: {
        name: 'Edited meanwhile',
        projectId: alice.projectId,
        createdByAgentId: 'policy-bot',
        rules: rules(100),
      },
    });
    const id = created.data.id as string;
    await h.call(`/v1/policy-drafts/${id}/submit`, { method: 'POST', headers: key() });
    await open('Drafts', 'Policy drafts');
    const card = page.locator(`li[data-draft-id="${id}"]`);
    await eventually(() => card.locator('tbody tr').first().textContent()).toMatch(/less than or equal 100$/);
    // The agent rewrites the limit while the page shows the old one.
    await h.call(`/v1/policy-drafts/${id}`, { method: 'PATCH', headers: key(), body: { status: 'draft' } });
    await h.call(`/v1/policy-drafts/${id}`, { method: 'PATCH', headers: key(), body: { rules: rules(7) } });
    await h.call(`/v1/policy-drafts/${id}/submit`, { method: 'POST', headers: key() });
    await card.getByRole('button', { name: 'Replay against decisions' }).click();
    await card.locator('[data-replay]').waitFor();
    expect(await card.locator('.rules tbody tr, tbody tr').first().textContent()).toMatch(
      /less than or equal 7$/,
    );
    expect(await card.getByRole('status').first().textContent()).toMatch(/edited since this page read it/);
    expect(await card.locator('[data-replay-stale]').count()).toBe(0);
  }, 120_000);

  it('escapes invisible characters in policy tool names, draft rule actions and upstream names', async () => {
    const tool = 'refund\u202Eyap';
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: { toolName: tool, constraints: [{ argumentName: 'amount', maximum: 10 }] },
    });
    await open('Policies', 'Policies');
    const row = page.locator('tr[data-policy]').filter({ hasText: 'refund' });
    await row.waitFor();
    expect(await row.locator('a').textContent()).toBe('refund\\u202Eyap');
    expect(await row.locator('a [data-revealed="escape"]').count()).toBe(1);
    await page.getByRole('button', { name: 'Deactivate refund\\u202Eyap' }).waitFor();
    await row.locator('a').click();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Policy for refund\\u202Eyap');

    const created = await h.call('/v1/policy-drafts', {
      method: 'POST',
      headers: key(),
      body: {
        name: 'Hidden action',
        projectId: alice.projectId,
        createdByAgentId: 'policy-bot',
        rules: [{ id: 'r1', action: 'deny\u200B', tools: ['pay'], conditions: [], severity: 'high' }],
      },
    });
    await open('Drafts', 'Policy drafts');
    const rule = page.locator(`li[data-draft-id="${created.data.id}"] tbody tr`).first();
    await rule.waitFor();
    expect(await rule.locator('td').nth(1).textContent()).toBe('deny\\u200B');

    await h.call('/v1/mcp/upstreams', {
      method: 'POST',
      headers: key(),
      body: { name: 'docs\u202Elanretni', slug: 'docs', url: 'https://docs.example.com/mcp' },
    });
    await open('Settings', 'Settings');
    const upstream = page.locator('li[data-upstream="docs"]');
    await upstream.waitFor();
    expect(await upstream.locator('strong').textContent()).toBe('docs\\u202Elanretni');
  }, 120_000);

  it('stays signed in, and says so, when the sign-out fails', async () => {
    const unavailable = { status: 503, code: 'service_unavailable', message: 'Try again shortly.' };
    await whileFailing(page, '**/v1/auth/logout', unavailable, async () => {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.locator('[data-sign-out-failed]').waitFor();
      expect(await page.locator('[data-sign-out-failed]').textContent()).toBe(
        'You are still signed in: the sign-out failed. Try again shortly.',
      );
      expect(await page.getByRole('heading', { name: 'Sign in to svc' }).count()).toBe(0);
    });
    // The session still works; signing out again ends it.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to svc' }).waitFor();
    await page.goto(h.base);
    await page.getByRole('heading', { name: 'Sign in to svc' }).waitFor();
  }, 120_000);
});
