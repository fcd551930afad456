import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DashboardHarness,
  eventually,
  focusedOn,
  type Organization,
  openPage,
  startDashboard,
  whileFailing,
} from './dashboard.js';
import { gate } from './helpers.js';

/**
 * The dashboard walked through as a reviewer of an organization, keyboard first: the focus stays
 * where the person works once an action is done (a draft approved, a batch denied, a change reviewed,
 * a page of decisions turned, a secret put away), a draft that applies nothing says so, the date
 * filters take the days the page shows times in, and lists not read yet are not said to be empty.
 * A real server process and Debian's Chromium; the tests build on each other, in order.
 */
let h: DashboardHarness;
let page: Page;
let alice: Organization;

const key = () => ({ 'x-service-api-key': alice.apiKey });
const validate = (tool: string, args: Record<string, unknown>) =>
  h.call('/v1/tools/validate', {
    method: 'POST',
    headers: key(),
    body: { tool_name: tool, arguments: args },
  });
const open = (label: string, heading: string) => openPage(page, label, heading);
/** The focused element as `tag|accessible label or text`, BODY when nothing is. */
const focused = () => focusedOn(page);
/** Whether the focused element matches `selector`. */
const focusOn = (selector: string) =>
  page.evaluate<boolean>(`document.activeElement?.matches(${JSON.stringify(selector)}) === true`);
/** Presses a button from the keyboard, once it can be pressed: Enter on a disabled one does nothing. */
const press = async (button: ReturnType<Page['getByRole']>) => {
  await eventually(() => button.isEnabled()).toBe(true);
  await button.focus();
  await page.keyboard.press('Enter');
};

beforeAll(async () => {
  h = await startDashboard({ SVC_CHECKPOINT_INTERVAL: '0' });
  page = h.page;
  alice = await h.organization('alice', 'alice-review');
  await h.call('/v1/policies', {
    method: 'POST',
    headers: key(),
    body: {
      toolName: 'pay',
      constraints: [{ argumentName: 'amount', maximum: 100, action: 'require_approval' }],
    },
  });
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the dashboard as a reviewer uses it', () => {
  it('keeps the focus on the queue after a batch is denied from the keyboard', async () => {
    for (const amount of [500, 600]) await validate('pay', { amount });
    await open('Approvals', 'Pending approvals');
    await eventually(() => page.locator('li.card').count()).toBe(2);
    for (const box of await page.locator('li.card input[type=checkbox]').all()) await box.check();
    await press(page.getByRole('button', { name: 'Deny selected (2)' }));
    await eventually(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    // The batch buttons are gone with the cards: the focus is on the heading, not on the page.
    expect(await focused()).toBe('h1|Pending approvals');
  }, 120_000);

  it('says why the drafts could not be read, and stops saying it is loading them', async () => {
    const busy = { status: 503, code: 'unavailable', message: 'The store is busy' };
    await whileFailing(page, '**/v1/policy-drafts', busy, async () => {
      await open('Drafts', 'Policy drafts');
      await page.getByText('The store is busy').waitFor();
      expect(await page.locator('main [aria-busy="true"]').count()).toBe(0);
    });
  }, 120_000);

  it('reviews a draft from the keyboard, and says when approving it applied nothing', async () => {
    const created = await h.call('/v1/policy-drafts', {
      method: 'POST',
      headers: key(),
      body: {
        name: 'No searches',
        projectId: alice.projectId,
        createdByAgentId: 'policy-bot',
        rules: [{ id: 'nosearch', action: 'deny', tools: ['search'], conditions: [], severity: 'low' }],
      },
    });
    const id = created.data.id as string;
    await h.call(`/v1/policy-drafts/${id}/submit`, { method: 'POST', headers: key() });
    await validate('search', { q: 'a' });

    await open('Drafts', 'Policy drafts');
    const card = page.locator(`li[data-draft-id="${id}"]`);
    await card.waitFor();
    // The replay button is disabled while it runs; the focus comes back to it.
    await press(card.getByRole('button', { name: 'Replay against decisions' }));
    await card.locator('[data-replay]').waitFor();
    await eventually(focused).toBe('button|Replay against decisions');
    // Its one rule cannot be replayed: that is why nothing was examined, not a lack of decisions.
    expect(await card.locator('[data-replay] [role=status]').textContent()).toBe(
      'Nothing to replay: no rule of this draft can be applied.',
    );

    await press(card.getByRole('button', { name: 'Approve draft' }));
    await eventually(() => card.locator('.left').textContent()).toBe('Approved');
    // Approved, and nothing enforced: said as a warning with the reason, not "Applied: nothing".
    const outcome = card.locator('[data-outcome]');
    expect(await outcome.getAttribute('data-outcome')).toBe('warn');
    expect(await outcome.textContent()).toMatch(
      /^Approved, but nothing was applied: no policy changed\. Not applied: rule nosearch: action "deny" cannot become constraints/,
    );
    // The approve and reject buttons are gone: the focus is on the card, where the person was.
    await eventually(() => focusOn(`li[data-draft-id="${id}"]`)).toBe(true);
    await page.keyboard.press('Tab');
    expect(await focusOn(`li[data-draft-id="${id}"] *`)).toBe(true);
  }, 120_000);

  it('filters decisions by the days the page shows, in its time zone, and keeps the focus when paging', async () => {
    for (let i = 0; i < 51; i++) await validate('lookup', { i });
    const all = await h.call('/v1/decisions?limit=1', { headers: key() });
    const newest = all.data[0] as { id: string; createdAt: string };
    // A zone where the newest decision falls on another day than in UTC.
    const made = new Date(newest.createdAt);
    const zone = made.getUTCHours() < 12 ? 'Etc/GMT+12' : 'Etc/GMT-14';
    const localDay = new Intl.DateTimeFormat('en-CA', { timeZone: zone }).format(made);
    expect(localDay).not.toBe(newest.createdAt.slice(0, 10));

    const cdp = await h.context.newCDPSession(page);
    try {
      await cdp.send('Emulation.setTimezoneOverride', { timezoneId: zone });
      await open('Decisions', 'Decisions');
      await page.locator(`tr[data-decision-id="${newest.id}"]`).waitFor();
      // The day in the box is the day the list shows the decision on.
      const shown = await page.locator(`tr[data-decision-id="${newest.id}"] td`).first().textContent();
      const locale = await page.evaluate<string>('navigator.language');
      expect(shown!.split(',')[0]).toBe(new Intl.DateTimeFormat(locale, { timeZone: zone }).format(made));
      await page.getByLabel('From', { exact: true }).fill(localDay);
      await page.getByLabel('To', { exact: true }).fill(localDay);
      await page.getByRole('button', { name: 'Apply filters' }).click();
      await page.locator(`tr[data-decision-id="${newest.id}"]`).waitFor();
      await eventually(() => page.locator('[data-range]').textContent()).toMatch(/^1–50 of \d+$/);
      await page.getByRole('button', { name: 'Clear' }).click();
    } finally {
      await cdp.send('Emulation.setTimezoneOverride', { timezoneId: '' });
      await cdp.detach();
    }

    // Older, from the keyboard, to the last page: the button is disabled there and loses the focus,
    // which goes to the range of the page read.
    await eventually(() => page.locator('[data-range]').textContent()).toMatch(/^1–50 of/);
    await press(page.getByRole('button', { name: 'Older' }));
    await eventually(() => page.locator('[data-range]').textContent()).toMatch(/^51–/);
    expect(await page.getByRole('button', { name: 'Older' }).isDisabled()).toBe(true);
    await eventually(() => focusOn('[data-range]')).toBe(true);
    // Verify chain is disabled while it runs: the focus comes back to it.
    await press(page.getByRole('button', { name: 'Verify chain' }));
    await eventually(() => page.locator('.chain-result').textContent()).toMatch(/^Verified/);
    await eventually(focused).toBe('button|Verify chain');
  }, 120_000);

  it('proposes and approves a change with Charter from the keyboard, and does not call an unread list empty', async () => {
    const { opened: released, open: release } = gate();
    const list = '**/v1/charter/verifications';
    await page.route(list, async (r) => {
      await released;
      await r.fallback();
    });
    try {
      await open('Charter', 'Charter');
      // Not read yet: loading, not "No change is waiting."
      expect(
        await page.locator('section[aria-labelledby="reviews-title"] [aria-busy="true"]').textContent(),
      ).toBe('Loading…');
      expect(await page.getByText('No change is waiting.').count()).toBe(0);
    } finally {
      release();
      await page.unroute(list);
    }
    await page.getByText('No change is waiting.').waitFor();

    const message = page.getByLabel('Message');
    await message.fill('Block pay over $1,000');
    await page.getByLabel('Mode').selectOption('compile');
    await press(page.getByRole('button', { name: 'Send' }));
    await page.getByRole('link', { name: 'Review the proposed change' }).waitFor();
    // Send is disabled while Charter answers: the focus is back in the message box.
    await eventually(focused).toBe('textarea|');
    expect(await message.inputValue()).toBe('');

    await press(page.getByRole('link', { name: 'Review the proposed change' }));
    await page.getByRole('heading', { name: 'Review a policy change' }).waitFor();
    await press(page.getByRole('button', { name: 'Approve change' }));
    await eventually(() => page.locator('[data-status]').getAttribute('data-status')).toBe('approved');
    // The buttons are gone: the focus is on what the change is now.
    await eventually(() => focusOn('[data-status]')).toBe(true);

    // A list that could not be read says so, and is not said to be empty either.
    const resting = { status: 503, code: 'unavailable', message: 'Charter is resting' };
    await whileFailing(page, '**/v1/charter/verifications', resting, async () => {
      await page.getByRole('link', { name: '← Charter' }).click();
      await page.getByText('Charter is resting').waitFor();
      expect(await page.getByText('No change is waiting.').count()).toBe(0);
    });
  }, 120_000);

  it('offers no dry run for a policy that does not exist', async () => {
    await page.goto(`${h.base}/policies/no-such-tool`);
    await page.getByText('There is no policy for no-such-tool.').waitFor();
    expect(await page.getByRole('heading', { name: 'Try a call' }).count()).toBe(0);
    await page.getByRole('link', { name: 'Create a policy for no-such-tool' }).click();
    await page.getByRole('heading', { name: 'Try a call' }).waitFor();
  }, 120_000);

  it('gives the focus back after a secret is put away and a key revoked, and says when a key could not be copied', async () => {
    await open('Settings', 'Settings');
    const name = page.getByLabel('Key name');
    await name.fill('ci-bot');
    await press(page.getByRole('button', { name: 'Create key' }));
    const box = page.locator('[data-secret-box]');
    await box.waitFor();

    // No clipboard for the page (a page served over plain HTTP elsewhere than this machine): Copy
    // says so and selects the key, instead of doing nothing.
    await page.evaluate(
      "Object.defineProperty(Navigator.prototype, 'clipboard', { configurable: true, get: () => undefined })",
    );
    await box.getByRole('button', { name: 'Copy', exact: true }).click();
    await box.locator('[data-copy-failed]').waitFor();
    const secret = await box.locator('[data-secret]').textContent();
    expect(await page.evaluate<string>('String(window.getSelection())')).toBe(secret);

    // Put away from the keyboard: the box had the focus and is gone; the focus goes back to the form.
    await press(box.getByRole('button', { name: 'I have stored it' }));
    await eventually(() => name.evaluate((e) => e === e.ownerDocument.activeElement)).toBe(true);

    await press(page.getByRole('button', { name: 'Revoke ci-bot' }));
    // Confirm is enabled only after a short delay (a double press must not confirm): press waits for it.
    await press(page.getByRole('button', { name: 'Confirm revoke' }));
    await eventually(() => page.locator('tr', { hasText: 'ci-bot' }).textContent()).toMatch(/revoked/);
    // The row's buttons are gone: the focus is on the section, not on the page.
    await eventually(focused).toBe('h2|API keys');

    // A slug the service refuses is refused here, in words, before anything is sent.
    let sent = false;
    const upstreams = '**/v1/mcp/upstreams';
    await page.route(upstreams, (r) => {
      if (r.request().method() === 'POST') sent = true;
      return r.fallback();
    });
    try {
      await page.getByLabel('Upstream name').fill('Docs');
      const slug = page.getByLabel(/^Slug/);
      await slug.fill('Docs Server');
      await page.getByLabel('URL', { exact: true }).fill('https://93.184.216.34/mcp');
      await page.getByRole('button', { name: 'Add upstream' }).click();
      expect(
        await slug.evaluate(
          (e) => (e as unknown as { validity: { patternMismatch: boolean } }).validity.patternMismatch,
        ),
      ).toBe(true);
      expect(sent).toBe(false);
    } finally {
      await page.unroute(upstreams);
    }
  }, 120_000);

  it('says how long a spend approval waits, to the second', async () => {
    await h.call('/v1/economic/config', {
      method: 'PUT',
      headers: alice.userAuth,
      body: { approvedPayers: ['corp-card'], approvalWindowSeconds: 90 },
    });
    await open('Budgets', 'Spend budgets');
    await eventually(() => page.locator('[data-approval-window]').textContent()).toBe('1 min 30 s');
  }, 120_000);
});
