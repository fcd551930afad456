import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../src/storage/db.js';
import { type DashboardHarness, eventually, openPage, startDashboard } from './dashboard.js';
import { rewriteChain } from './ledger.js';

/**
 * The Policies, Decisions and Settings pages in a real browser against a real server process: a
 * policy edited in the page governs the next validate call of an agent's key, the receipt chain is
 * verified in the browser (and its breaks found once the store is tampered with), and an API key is
 * shown once and revoked. Screenshots of each page at 1280 and 390 px wide.
 */
let h: DashboardHarness;
let page: Page;
let org: { id: string; name: string; apiKey: string };

const validate = (apiKey: string, args: Record<string, unknown>) =>
  h.call('/v1/tools/validate', {
    method: 'POST',
    headers: { 'x-service-api-key': apiKey },
    body: { tool_name: 'wire', arguments: args },
  });

async function shoot(name: string) {
  await page.screenshot({ path: join(h.screenshots, `${name}.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  // Usable on a phone: nothing widens the page beyond the screen (wide tables scroll in their box).
  expect(await page.locator('html').evaluate((html) => html.scrollWidth)).toBeLessThanOrEqual(390);
  await page.screenshot({ path: join(h.screenshots, `${name}-narrow.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
}

const statusOf = (selector: string) => () => page.locator(selector).textContent();

/** Polls until the expectation holds: generous, since the machine running the browser may be busy. */

beforeAll(async () => {
  // Checkpoints on demand only: the test signs them from the page.
  h = await startDashboard({ SVC_CHECKPOINT_INTERVAL: '0' });
  page = h.page;
  org = await h.organization('alice', 'alice-pages');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the dashboard pages in a browser', () => {
  it('creates and edits a policy in the page; the next validate call follows each edit', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Policies' }).click();
    await eventually(() => page.getByText('No policy yet').isVisible()).toBe(true);
    await page.getByRole('link', { name: 'New policy' }).click();
    await page.getByLabel('Tool name').fill('wire');
    const definition = page.getByLabel('Definition');

    // The quality report follows the text as it is typed: broken JSON, then an impossible range.
    await definition.fill('{"mode": "deterministic", "constraints": [');
    await eventually(statusOf('.quality')).toMatch(/Not valid JSON/);
    await definition.fill(
      JSON.stringify({ constraints: [{ argumentName: 'amount', minimum: 500, maximum: 100 }] }),
    );
    await eventually(statusOf('.quality')).toMatch(/Invalid · quality score/);
    expect(await page.locator('.quality li').allTextContents()).toEqual(
      expect.arrayContaining([expect.stringMatching(/minimum.*maximum|maximum.*minimum/i)]),
    );
    await definition.fill(
      JSON.stringify({ mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] }),
    );
    await eventually(statusOf('.quality')).toMatch(/^Valid · quality score \d+/);
    await page.getByRole('button', { name: 'Create policy' }).click();
    await eventually(() => page.getByRole('heading', { name: 'Policy for wire' }).isVisible()).toBe(true);
    expect(new URL(page.url()).pathname).toBe('/policies/wire');
    expect((await validate(org.apiKey, { amount: 50 })).decision).toBe('allow');

    // Edited to a lower maximum: the same call is now denied.
    await definition.fill(
      JSON.stringify(
        { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 10 }] },
        null,
        2,
      ),
    );
    await eventually(statusOf('.quality')).toMatch(/^Valid/);
    await page.getByRole('button', { name: 'Save' }).click();
    await eventually(() => page.getByText('Saved as version 2.').isVisible()).toBe(true);
    const denied = await validate(org.apiKey, { amount: 50 });
    expect(denied.decision).toBe('deny');

    // The dry run evaluates the text in the editor, saved or not, and records nothing.
    await page.getByLabel('Arguments (JSON)').fill('{"amount": 5}');
    await page.getByRole('button', { name: 'Try it' }).click();
    await eventually(statusOf('.dry-run')).toMatch(/^Decision: allow/);
    await definition.fill(
      JSON.stringify({ mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 1 }] }),
    );
    await page.getByRole('button', { name: 'Try it' }).click();
    await eventually(statusOf('.dry-run')).toMatch(/^Decision: deny/);
    expect((await validate(org.apiKey, { amount: 5 })).decision).toBe('allow');

    // The history has both versions; the first can be loaded back into the editor.
    await eventually(() => page.locator('.versions > li').count()).toBe(2);
    await page.locator('li[data-version="1"] summary').click();
    await page.getByRole('button', { name: 'Load version 1 into the editor' }).click();
    expect(JSON.parse(await definition.inputValue())).toMatchObject({
      constraints: [{ argumentName: 'amount', maximum: 100 }],
    });
    await shoot('policy-editor');

    // Deactivated: calls pass unchecked; activated again: checked again. Keyboard only.
    await page.getByRole('button', { name: 'Deactivate' }).focus();
    await page.keyboard.press('Enter');
    await eventually(() => page.getByText('version 2 · inactive').isVisible()).toBe(true);
    expect((await validate(org.apiKey, { amount: 50 })).decision).toBe('allow');
    await page.getByRole('button', { name: 'Activate' }).click();
    await eventually(() => page.getByText('version 2 · active').isVisible()).toBe(true);
    expect((await validate(org.apiKey, { amount: 50 })).decision).toBe('deny');

    // Delete, after a confirmation: the policy is gone from the API and from the list.
    await h.call('/v1/policies', {
      method: 'POST',
      headers: { 'x-service-api-key': org.apiKey },
      body: { toolName: 'scratch', constraints: [{ argumentName: 'x', maximum: 1 }] },
    });
    await page.getByRole('link', { name: 'All policies' }).click();
    await page.locator('tr[data-policy="scratch"]').getByRole('link', { name: 'scratch' }).click();
    await page.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page.locator('tr[data-policy="wire"]').waitFor();
    expect(await page.locator('tr[data-policy="scratch"]').count()).toBe(0);
    const policies = await h.call('/v1/policies', { headers: { 'x-service-api-key': org.apiKey } });
    expect(policies.data.map((p: { toolName: string }) => p.toolName)).toEqual(['wire']);
    await shoot('policies');
  }, 120_000);

  it('lists decisions with filters, shows receipts and verifies the chain in the browser', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Decisions' }).click();
    await page.locator('tr[data-decision-id]').first().waitFor();
    const all = await h.call('/v1/decisions', { headers: { 'x-service-api-key': org.apiKey } });
    expect(await page.locator('tr[data-decision-id]').count()).toBe(all.pagination.total);

    await page.getByLabel('Decision', { exact: true }).selectOption('deny');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await eventually(() => page.locator('td.verdict').allTextContents()).toEqual(['deny', 'deny']);
    await page.getByLabel('Tool', { exact: true }).fill('nothing-like-it');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await eventually(() => page.getByText('No decision matches.').isVisible()).toBe(true);
    await page.getByRole('button', { name: 'Clear' }).click();
    await eventually(() => page.locator('tr[data-decision-id]').count()).toBe(all.pagination.total);

    // A tool name pasted with spaces around it. Tool names may have them (the service takes any name
    // without control characters), so the filter is kept exact; the page says so and offers the name
    // without them.
    await page.getByLabel('Tool', { exact: true }).fill('  wire  ');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await eventually(() => page.getByText('No decision matches.').isVisible()).toBe(true);
    expect(await page.locator('[data-tool-spaces] p').textContent()).toBe(
      'The tool filter has 2 spaces before the name and 2 spaces after it: tool names are matched exactly, spaces included (a tool may have them in its name), so only decisions of a tool named with them are listed.',
    );
    await page.getByRole('button', { name: 'Filter by wire without the spaces' }).click();
    await eventually(() => page.locator('tr[data-decision-id]').count()).toBe(all.pagination.total);
    expect(await page.getByLabel('Tool', { exact: true }).inputValue()).toBe('wire');
    expect(await page.locator('[data-tool-spaces]').count()).toBe(0);
    await page.getByRole('button', { name: 'Clear' }).click();

    // A decision's receipt, and that one receipt verified against a signed checkpoint.
    const first = all.data[0] as { id: string; receipt: { receipt_hash: string } };
    await page.getByRole('button', { name: `Receipt of wire ${first.id}` }).click();
    await eventually(() => page.locator('[data-receipt]').textContent()).toContain(
      first.receipt.receipt_hash,
    );
    await page.getByRole('button', { name: 'Verify this receipt' }).click();
    await eventually(statusOf('.receipt [role=status]')).toMatch(
      /^Verified: this receipt is leaf \d+ of the signed checkpoint of \d+ receipts\./,
    );

    // The whole chain, with a checkpoint signed now, from the keyboard.
    await page.getByRole('button', { name: 'Sign a checkpoint now' }).click();
    await eventually(statusOf('.chain-result')).toMatch(/Checkpoint of \d+ receipts signed/);
    const length = all.pagination.total;
    await page.getByRole('button', { name: 'Verify chain' }).focus();
    await page.keyboard.press('Enter');
    await eventually(statusOf('.chain-result')).toMatch(
      new RegExp(
        `^Verified: ${length} receipt\\(s\\), chain intact .*; [12] signed checkpoint\\(s\\) match\\.`,
      ),
    );
    await shoot('decisions');
  }, 120_000);

  it('shows a new API key once, revokes it, and manages projects, upstreams and the organization', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Settings' }).click();
    await eventually(() => page.locator('[data-plan]').textContent()).toBe('team');

    await page.getByLabel('New project name').fill('Billing');
    await page.getByRole('button', { name: 'Create project' }).click();
    await eventually(() => page.locator('[data-secret]').isVisible()).toBe(true);
    const projectKey = (await page.locator('[data-secret]').textContent())!;
    expect((await validate(projectKey, { amount: 50 })).decision).toBe('deny');
    await page.getByRole('button', { name: 'I have stored it' }).click();

    await page.getByLabel('Key name').fill('ci-bot');
    await page.getByLabel('Project', { exact: true }).selectOption({ label: 'Billing' });
    await page.getByRole('checkbox', { name: /approvals:resolve/ }).check();
    await page.getByRole('button', { name: 'Create key' }).click();
    await eventually(() => page.locator('[data-secret]').isVisible()).toBe(true);
    const key = (await page.locator('[data-secret]').textContent())!;
    expect(key).not.toBe(projectKey);
    expect((await validate(key, { amount: 5 })).decision).toBe('allow');
    const row = page.locator('tr', { hasText: 'ci-bot' });
    expect(await row.textContent()).toMatch(/Billing.*api, approvals:resolve.*active/);
    await shoot('settings');

    // Shown once: gone from the page once acknowledged, and never again after a reload.
    await page.getByRole('button', { name: 'I have stored it' }).click();
    expect(await page.content()).not.toContain(key);
    await page.reload();
    await page.locator('tr', { hasText: 'ci-bot' }).waitFor();
    expect(await page.content()).not.toContain(key);

    await page.getByRole('button', { name: 'Revoke ci-bot' }).click();
    await page.getByRole('button', { name: 'Confirm revoke' }).click();
    await eventually(() => page.locator('tr', { hasText: 'ci-bot' }).textContent()).toMatch(/revoked/);
    await expect(validate(key, { amount: 5 })).rejects.toThrow(/answered 401/);

    // MCP upstreams: add one (the header value is write-only), then delete it.
    await page.getByLabel('Upstream name').fill('Docs server');
    await page.getByLabel('Slug').fill('docs');
    await page.getByLabel('URL', { exact: true }).fill('https://93.184.216.34/mcp');
    await page.getByLabel(/^Header name/).fill('Authorization');
    await page.getByLabel(/^Header value/).fill('Bearer upstream-secret');
    await page.getByRole('button', { name: 'Add upstream' }).click();
    const card = page.locator('li[data-upstream="docs"]');
    await card.waitFor();
    expect(await card.textContent()).toMatch(/Docs server.*mcp-streamable-http.*headers: authorization/is);
    expect(await page.content()).not.toContain('upstream-secret');
    await card.getByRole('button', { name: 'Delete upstream docs' }).click();
    await card.getByRole('button', { name: 'Confirm delete' }).click();
    await eventually(() => card.count()).toBe(0);
    const upstreams = await h.call('/v1/mcp/upstreams', { headers: { 'x-service-api-key': org.apiKey } });
    expect(upstreams.data).toEqual([]);

    await page.getByLabel('Name', { exact: true }).fill('Alice Payments');
    await page.getByRole('button', { name: 'Rename' }).click();
    await eventually(() => page.getByText(/^Saved\./).isVisible()).toBe(true);
    const renamed = await h.call(`/v1/organizations/${org.id}`, {
      headers: { 'x-service-api-key': org.apiKey },
    });
    expect(renamed.name).toBe('Alice Payments');
  }, 120_000);

  it('reports the first break of a tampered chain, and a rewrite that contradicts a signed checkpoint', async () => {
    const store: Store = openStore(h.db.url);
    try {
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Decisions' }).click();
      await page.getByRole('button', { name: 'Sign a checkpoint now' }).click();
      await eventually(statusOf('.chain-result')).toMatch(/Checkpoint of \d+ receipts signed/);
      await page.getByRole('button', { name: 'Verify chain' }).click();
      await eventually(statusOf('.chain-result')).toMatch(/^Verified: .*[12] signed checkpoint\(s\) match/);

      // One receipt edited in place: its hash no longer matches its content.
      const row = await store.db
        .selectFrom('receipts')
        .select('payload')
        .where('organization_id', '=', org.id)
        .where('sequence', '=', 1)
        .executeTakeFirstOrThrow();
      await store.db
        .updateTable('receipts')
        .set({ payload: JSON.stringify({ ...JSON.parse(row.payload), reason: 'nothing to see' }) })
        .where('organization_id', '=', org.id)
        .where('sequence', '=', 1)
        .execute();
      await page.getByRole('button', { name: 'Verify chain' }).click();
      await eventually(statusOf('.chain-result')).toMatch(
        /^Broken at receipt 1: receipt_hash does not match the receipt content/,
      );
      await shoot('decisions-broken');

      // The whole chain recomputed around the edit: consistent in itself, but not what was signed.
      await rewriteChain({ store }, org.id, 1, 'nothing to see');
      await page.getByRole('button', { name: 'Verify chain' }).click();
      await eventually(statusOf('.chain-result')).toMatch(
        /^Broken at checkpoint \d+: root over receipts 0\.\.\d+ is sha256:[0-9a-f]{64}, the checkpoint signed .*the history was changed after it was signed/,
      );
    } finally {
      await store.close();
    }
  }, 120_000);

  it('keeps every page within a 390 px screen, and within 1280 px, with 100-character organization and project names', async () => {
    // Names as long as the service takes (100 characters): one of words, one without a place to break.
    const orgName =
      'Customer Support Agents - Production EU West - Payments, Refunds and Chargebacks Operations Team 001';
    const wordy =
      'Customer Support Agents - Production EU West - Tier 2 Escalations, Refunds and Chargebacks Queue 001';
    const unbroken = 'P'.repeat(100);
    expect([orgName.length, wordy.length]).toEqual([100, 100]);
    const long = await h.organization('alice', 'alice-long-names');
    await h.call(`/v1/organizations/${long.id}`, {
      method: 'PUT',
      headers: long.userAuth,
      body: { name: orgName },
    });
    const keys: string[] = [];
    for (const name of [wordy, unbroken]) {
      const project = await h.call('/v1/projects', {
        method: 'POST',
        headers: long.userAuth,
        body: { organizationId: long.id, name },
      });
      keys.push(project.apiKey);
    }
    // Something on each page: a policy, decisions of both projects, an approval waiting.
    await h.call('/v1/policies', {
      method: 'POST',
      headers: { 'x-service-api-key': keys[0]! },
      body: {
        toolName: 'wire',
        constraints: [{ argumentName: 'amount', maximum: 10, action: 'require_approval' }],
      },
    });
    for (const key of keys) await validate(key, { amount: 50 });

    await page.reload();
    await page.getByLabel('Organization').selectOption(long.id);
    const menu = page.getByLabel('Organization');
    // The menu is cut short, the name whole in its title and its option.
    expect(await menu.getAttribute('title')).toBe(orgName);
    expect(await menu.locator(`option[value="${long.id}"]`).textContent()).toBe(orgName);

    const pages: [string, string][] = [
      ['Approvals', 'Pending approvals'],
      ['Decisions', 'Decisions'],
      ['Policies', 'Policies'],
      ['Drafts', 'Policy drafts'],
      ['Charter', 'Charter'],
      ['Budgets', 'Spend budgets'],
      ['Settings', 'Settings'],
    ];
    for (const width of [390, 1280]) {
      await page.setViewportSize({ width, height: 844 });
      for (const [label, heading] of pages) {
        await openPage(page, label, heading);
        // What each page reads (the projects of its menus among them) is there before it is measured.
        await eventually(() => page.locator('[aria-busy="true"]').count()).toBe(0);
        if (label === 'Decisions' || label === 'Settings')
          await eventually(() => page.locator(`option:text-is("${unbroken}")`).count()).toBeGreaterThan(0);
        expect(await overflow(), `${label} at ${width} px`).toEqual({ page: [], boxes: [] });
      }
      await openPage(page, 'Policies', 'Policies');
      await page.locator('tr[data-policy="wire"]').getByRole('link', { name: 'wire' }).click();
      await page.getByRole('heading', { name: 'Policy for wire' }).waitFor();
      expect(await overflow(), `policy editor at ${width} px`).toEqual({ page: [], boxes: [] });
    }
    await page.setViewportSize({ width: 1280, height: 800 });
  }, 120_000);
});

/**
 * What sticks out: the page's width beyond the window (`page`, as `scrollWidth > innerWidth`), and
 * the form controls, labels and fields reaching past the panel, form or card they are in (`boxes`),
 * wide tables' boxes aside (they scroll by themselves). Empty lists when nothing does.
 */
const overflow = () =>
  page.evaluate<{ page: string[]; boxes: string[] }>(`(() => {
    const html = document.documentElement;
    const pageWide = html.scrollWidth > window.innerWidth ? [html.scrollWidth + ' > ' + window.innerWidth] : [];
    const boxes = [];
    for (const box of document.querySelectorAll('header.bar, main, .panel, form, .card')) {
      const edge = box.getBoundingClientRect().right + 0.5;
      for (const el of box.querySelectorAll('input, select, textarea, button, fieldset, label, .field')) {
        if (el.closest('.scroll') || el.closest('.visually-hidden')) continue;
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.right > edge)
          boxes.push(el.tagName.toLowerCase() + ' "' + (el.getAttribute('aria-label') || el.id || el.textContent).slice(0, 40) +
            '" in ' + (box.className || box.tagName.toLowerCase()) + ': ' + Math.round(r.right) + ' > ' + Math.round(edge));
      }
    }
    return { page: pageWide, boxes: [...new Set(boxes)] };
  })()`);
