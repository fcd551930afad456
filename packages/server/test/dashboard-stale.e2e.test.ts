import type { Page, Request, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DashboardHarness,
  eventually,
  focusedOn,
  type Organization,
  openPage,
  startDashboard,
  submittedDraft,
} from './dashboard.js';
import { ADMIN_TOKEN } from './helpers.js';

/**
 * What the dashboard shows when what it read changed elsewhere: a draft, a key, an upstream or a
 * policy deleted in another tab, a sign-in link that did not work while signed in, and another
 * person signing in in another tab of the same browser. A real server process and Debian's Chromium;
 * the tests build on each other, in order.
 */
let h: DashboardHarness;
let page: Page;
let alice: Organization;

const key = () => ({ 'x-service-api-key': alice.apiKey });
const open = (label: string, heading: string) => openPage(page, label, heading);
const draft = (name: string) => submittedDraft(h, alice, name);

beforeAll(async () => {
  h = await startDashboard();
  page = h.page;
  alice = await h.organization('alice', 'alice-stale');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the dashboard after what it shows changed elsewhere', () => {
  it('keeps the card of a draft deleted in another tab when approving it, and says nothing was approved', async () => {
    // The page must not learn of the deletion before the person presses Approve: a read of the list
    // (its 15 s poll, or one the event stream asks for) would hold the card as deleted and disable the
    // button first. Once the card is shown, the list's reads wait until the approval was answered,
    // and one already under way is let finish before the draft is deleted.
    const list = /\/v1\/policy-drafts(\?|$)/;
    const held: Route[] = [];
    const reading = new Set<Request>();
    let holding = false;
    const done = (r: Request) => reading.delete(r);
    page.on('requestfinished', done);
    page.on('requestfailed', done);
    await page.route(list, (route) => {
      if (route.request().method() !== 'GET') return route.continue();
      if (holding) return void held.push(route);
      reading.add(route.request());
      return route.continue();
    });
    const id = await draft('Doomed draft');
    await open('Drafts', 'Policy drafts');
    const card = page.locator(`li[data-draft-id="${id}"]`);
    const approve = card.locator('button:text-is("Approve draft")');
    await approve.waitFor();
    holding = true;
    await eventually(() => reading.size).toBe(0);
    await h.call(`/v1/policy-drafts/${id}`, { method: 'DELETE', headers: key() });

    const answer = page.waitForResponse((r) => r.url().endsWith(`/v1/policy-drafts/${id}/approve`));
    await approve.focus();
    await page.keyboard.press('Enter');
    expect((await answer).status()).toBe(404);
    await page.unroute(list);
    page.off('requestfinished', done);
    page.off('requestfailed', done);
    for (const route of held.splice(0)) await route.continue();
    await card.locator('[data-draft-held="deleted"]').waitFor();
    expect(await card.locator('[data-draft-held="deleted"] p').textContent()).toBe(
      'This draft was deleted since you read it: nothing of it can be approved.',
    );
    expect(await card.locator('[data-outcome="error"]').textContent()).toBe(
      'Nothing was approved: the draft was deleted since you read it.',
    );
    expect(await approve.isDisabled()).toBe(true);
    // The button pressed is disabled: the focus is on its card, not lost to the page.
    await eventually(() =>
      page.evaluate<string | null>("document.activeElement?.getAttribute('data-draft-id') ?? null"),
    ).toBe(id);
    // Removed when the person asks.
    await card.getByRole('button', { name: 'Remove it from the list' }).click();
    await card.waitFor({ state: 'detached' });
  }, 120_000);

  it('drops a key deleted in another tab from the list when revoking it fails, and says why', async () => {
    await h.call('/v1/api-keys', {
      method: 'POST',
      headers: alice.userAuth,
      body: { name: 'doomed-key', projectId: alice.projectId, scopes: ['api'] },
    });
    const listed = await h.call('/v1/api-keys', { headers: alice.userAuth });
    const doomed = listed.data.find((k: { name: string }) => k.name === 'doomed-key');
    await open('Settings', 'Settings');
    const row = page.locator(`tr[data-key-id="${doomed.id}"]`);
    await row.waitFor();
    await h.call(`/v1/api-keys/${doomed.id}`, { method: 'DELETE', headers: alice.userAuth });

    await page.getByRole('button', { name: 'Revoke doomed-key' }).click();
    const confirm = row.getByRole('button', { name: 'Confirm revoke' });
    await eventually(() => confirm.isEnabled()).toBe(true);
    const answer = page.waitForResponse((r) => r.url().endsWith(`/v1/api-keys/${doomed.id}/revoke`));
    await confirm.click();
    const refused = await answer;
    expect(refused.status()).toBe(404);
    const { error } = await refused.json();
    await row.waitFor({ state: 'detached' });
    // The refusal stays said once the list is read again without the key.
    const section = page.locator('section.panel', {
      has: page.getByRole('heading', { name: 'API keys', exact: true }),
    });
    expect(await section.locator('p.error').textContent()).toBe(error.message);
    await eventually(() => focusedOn(page)).toMatch(/^h2\|API keys/);
  }, 120_000);

  it('drops a policy deleted in another tab from the list when deactivating it fails, and says why', async () => {
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: { toolName: 'doomed_tool', constraints: [{ argumentName: 'amount', maximum: 10 }] },
    });
    await open('Policies', 'Policies');
    const row = page.locator('tr[data-policy="doomed_tool"]');
    await row.waitFor();
    await h.call('/v1/policies/doomed_tool', { method: 'DELETE', headers: key() });

    const answer = page.waitForResponse((r) => r.url().endsWith('/v1/policies/doomed_tool/deactivate'));
    await page.getByRole('button', { name: 'Deactivate doomed_tool' }).click();
    const refused = await answer;
    expect(refused.status()).toBe(404);
    const { error } = await refused.json();
    await row.waitFor({ state: 'detached' });
    expect(await page.getByRole('alert').filter({ hasText: error.message }).count()).toBe(1);
  }, 120_000);

  it('marks only the live version current in the history of a policy deleted and created again, on top', async () => {
    const body = (maximum: number) => ({ constraints: [{ argumentName: 'amount', maximum }] });
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: { toolName: 'reborn', ...body(1) },
    });
    for (const maximum of [2, 3, 4, 5])
      await h.call('/v1/policies/reborn', { method: 'PUT', headers: key(), body: body(maximum) });
    await h.call('/v1/policies/reborn', { method: 'DELETE', headers: key() });
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: { toolName: 'reborn', ...body(9) },
    });

    await page.goto(`${h.base}/policies/reborn`);
    await page.getByRole('heading', { name: 'Version history' }).waitFor();
    await eventually(() => page.locator('ul.versions > li').count()).toBe(6);
    const summaries = await page.locator('ul.versions summary').allTextContents();
    expect(summaries.filter((t) => t.endsWith('(current)'))).toHaveLength(1);
    expect(summaries[0]).toMatch(/^Version 1 · .* \(current\)$/);
    expect(summaries.slice(1).map((t) => t.split(' · ')[0])).toEqual([
      'Version 5',
      'Version 4',
      'Version 3',
      'Version 2',
      'Version 1',
    ]);
  }, 120_000);

  it("tries a call as the service would answer it: the plan's rule for approvals, an inactive policy unchecked", async () => {
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: {
        toolName: 'payout',
        constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      },
    });
    await h.call(`/v1/admin/organizations/${alice.id}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      body: { tier: 'free' },
    });
    const tryIt = async (args: object) => {
      await page.getByLabel('Arguments (JSON)').fill(JSON.stringify(args));
      await page.getByRole('button', { name: 'Try it' }).click();
      await page.locator('[data-dry-run]').waitFor();
    };
    try {
      await page.goto(`${h.base}/policies/payout`);
      await eventually(() => page.getByText('version 1 · active').isVisible()).toBe(true);
      await tryIt({ amount: 50 });
      expect(await page.locator('[data-dry-run]').getAttribute('data-dry-run')).toBe('deny');
      expect(await page.locator('[data-dry-run-note]').textContent()).toMatch(
        /plan is free, and human-in-the-loop approvals need the Team plan or above/,
      );
      // What the service answers, the same way.
      const validated = await h.call('/v1/tools/validate', {
        method: 'POST',
        headers: key(),
        body: { tool_name: 'payout', arguments: { amount: 50 } },
      });
      expect(validated.decision).toBe('deny');

      await h.call('/v1/policies/payout/deactivate', { method: 'POST', headers: key() });
      await page.goto(`${h.base}/policies/payout`);
      await eventually(() => page.getByText('version 1 · inactive').isVisible()).toBe(true);
      await tryIt({ amount: 50 });
      expect(await page.locator('[data-dry-run]').textContent()).toBe(
        'Decision: allow — Policy for tool "payout" is inactive; allowed without checks',
      );
      expect(await page.locator('[data-dry-run-when-active]').getAttribute('data-dry-run-when-active')).toBe(
        'deny',
      );
    } finally {
      await h.call(`/v1/admin/organizations/${alice.id}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        body: { tier: 'team' },
      });
    }
  }, 120_000);

  it('says a sign-in link that did not work did not, and who is still signed in', async () => {
    await page.goto(`${h.base}/v1/auth/login?token=used-or-mistyped`);
    const notice = page.locator('[data-sign-in-failed]');
    await notice.waitFor();
    expect(await notice.textContent()).toBe(
      'That sign-in did not work: the link was already used, it expired or it was mistyped, or the sign-in was started in another browser. Start again. You are still signed in as alice.',
    );
    expect(await page.getByRole('alert').filter({ hasText: 'That sign-in did not work' }).count()).toBe(1);
    expect(await page.locator('.who').textContent()).toBe('alice');
    // Said once: the address no longer carries it.
    expect(new URL(page.url()).search).toBe('');
  }, 120_000);

  it("stops showing a person's data once another person signed in in another tab of the browser", async () => {
    await h.organization('bob', 'bob-stale');
    const other = await h.context.newPage();
    try {
      await other.goto(await h.loginLink('bob'));
      await other.getByRole('heading', { name: 'Pending approvals' }).waitFor();
    } finally {
      await other.close();
    }
    // The page still shows alice's organization; its next request answers as bob (not a member).
    await open('Decisions', 'Decisions');
    const changed = page.locator('[data-session-changed]');
    await changed.waitFor();
    expect(await changed.textContent()).toBe(
      'The session changed: bob signed in in another tab or window of this browser, which ended the session of alice here. This page now shows what bob can see.',
    );
    expect(await page.locator('.who').textContent()).toBe('bob');
    expect(await page.getByRole('combobox', { name: 'Organization' }).textContent()).toBe('Org bob-stale');
  }, 120_000);
});
