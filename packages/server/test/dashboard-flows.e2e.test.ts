import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHarness, eventually, type Organization, startDashboard } from './dashboard.js';
import { type FakeModelServer, fakeLlmEnv, startFakeModelServer } from './llm-providers.js';

/**
 * The review pages of the dashboard in a real browser against a real server process: a policy
 * draft replayed against recorded decisions and approved, spend and capsule approvals showing the
 * action they are bound to, the spend budget figures, a Charter conversation whose proposed change
 * is approved from its review link, and a person of another organization seeing none of it.
 * The model Charter asks is a local fake (no outside network). The tests build on each other, in order.
 */
let h: DashboardHarness;
let model: FakeModelServer;
let page: Page;
let alice: Organization;
let linkPath: string;
let draftId: string;

const MODEL_ANSWER = 'Only people of the organization approve policy changes; Charter proposes them.';

beforeAll(async () => {
  model = await startFakeModelServer(() => ({ object: { answer: MODEL_ANSWER } }));
  h = await startDashboard(fakeLlmEnv(model.url, { SVC_LLM_TIMEOUT_MS: '5000' }));
  page = h.page;
  alice = await h.organization('alice', 'alice-flows');
  await h.organization('mallory', 'mallory-flows');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
  await model?.close();
});

const key = () => ({ 'x-service-api-key': alice.apiKey });
const shot = async (name: string) => {
  await page.screenshot({ path: join(h.screenshots, `${name}.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  // Usable on a phone: nothing widens the page beyond the screen (wide tables scroll in their box).
  expect(await page.locator('html').evaluate((html) => html.scrollWidth)).toBeLessThanOrEqual(390);
  await page.screenshot({ path: join(h.screenshots, `${name}-narrow.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
};
const open = async (path: string, heading: string) => {
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: path }).click();
  await page.getByRole('heading', { name: heading, exact: true }).waitFor();
};

describe('the dashboard review pages in a browser', () => {
  it('replays a draft against the decision log, shows the decisions it would change, and approves it', async () => {
    await h.call('/v1/policies', {
      method: 'POST',
      headers: key(),
      body: { toolName: 'pay', constraints: [{ argumentName: 'amount', maximum: 1000 }] },
    });
    for (const amount of [5, 500, 5000]) {
      await h.call('/v1/tools/validate', {
        method: 'POST',
        headers: key(),
        body: {
          tool_name: 'pay',
          arguments: { amount },
          context: { agent_id: 'payer-bot', session_id: 's-9' },
        },
      });
    }
    const created = await h.call('/v1/policy-drafts', {
      method: 'POST',
      headers: key(),
      body: {
        name: 'Small payments only',
        projectId: alice.projectId,
        createdByAgentId: 'policy-bot',
        rules: [
          {
            id: 'cap',
            action: 'allow',
            tools: ['pay'],
            conditions: [{ field: 'arguments.amount', operator: 'less_than_or_equal', value: 100 }],
            severity: 'high',
          },
        ],
      },
    });
    draftId = created.data.id;
    await h.call(`/v1/policy-drafts/${draftId}/submit`, { method: 'POST', headers: key() });

    await open('Drafts', 'Policy drafts');
    const card = page.locator(`li[data-draft-id="${draftId}"]`);
    await card.waitFor();
    expect(await card.textContent()).toMatch(/Small payments only.*Waiting for review.*policy-bot/s);
    expect(await card.locator('tbody tr').first().textContent()).toMatch(
      /cap.*allow.*pay.*less than or equal 100/,
    );

    // Keyboard only: the limit field, then Tab to the replay button, then Enter.
    const limit = card.getByLabel('Recent decisions to replay');
    await limit.fill('10');
    await limit.focus();
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement?.textContent')).toBe('Replay against decisions');
    await page.keyboard.press('Enter');
    const replay = card.locator('[data-replay]');
    await replay.waitFor();
    expect(await replay.getByRole('status').textContent()).toBe(
      'Of the last 3 decisions for pay, 1 would have ended differently.',
    );
    const rows = replay.locator('tbody tr');
    expect(await rows.count()).toBe(1);
    expect(await rows.first().textContent()).toMatch(
      /pay \{"amount":500\}.*payer-bot.*allow.*deny.*at most 100/s,
    );
    await shot('drafts');

    // The agent rewrites the draft while the person looks at it: approving the card applies nothing,
    // says why and shows the rules as they are now.
    await h.call(`/v1/policy-drafts/${draftId}`, {
      method: 'PATCH',
      headers: key(),
      body: { status: 'draft' },
    });
    const rules = created.data.rules as { conditions: { value: number }[] }[];
    rules[0]!.conditions[0]!.value = 200;
    await h.call(`/v1/policy-drafts/${draftId}`, { method: 'PATCH', headers: key(), body: { rules } });
    await h.call(`/v1/policy-drafts/${draftId}/submit`, { method: 'POST', headers: key() });
    await card.getByRole('button', { name: 'Approve draft' }).click();
    await eventually(() => card.getByRole('status').first().textContent()).toMatch(/edited since/);
    await eventually(() => card.locator('tbody tr').first().textContent()).toMatch(/less than or equal 200/);
    expect(await card.locator('.left').textContent()).toBe('Waiting for review');

    await card.getByRole('button', { name: 'Approve draft' }).click();
    await eventually(() => card.locator('.left').textContent()).toBe('Approved');
    expect(await card.getByRole('status').first().textContent()).toMatch(/Applied: pay version 2/);
    const now = await h.call('/v1/tools/validate', {
      method: 'POST',
      headers: key(),
      body: { tool_name: 'pay', arguments: { amount: 500 }, context: { session_id: 's-10' } },
    });
    expect(now.decision).toBe('deny');
  }, 120_000);

  it('shows a spend approval with the action it is bound to and approves it; a capsule approval with its payment', async () => {
    await h.call('/v1/economic/config', {
      method: 'PUT',
      headers: alice.userAuth,
      body: {
        approvedPayers: ['corp-card'],
        defaultPayer: 'corp-card',
        perActionApprovalThresholdUsd: 50,
        sessionLimitUsd: 500,
        agentLimitUsd: 1000,
        categoryPolicies: { travel: { limitUsd: 300 } },
      },
    });
    const action = (actionId: string, usd: number) => ({
      actionId,
      sessionId: 's-1',
      agentId: 'buyer',
      toolName: 'book_flight',
      category: 'travel',
      estimatedSpendUsd: usd,
    });
    const small = await h.call('/v1/economic/authorize', {
      method: 'POST',
      headers: key(),
      body: action('act-1', 20),
    });
    expect(small.decision).toBe('allow');
    await h.call('/v1/economic/commit', {
      method: 'POST',
      headers: key(),
      body: {
        actionId: 'act-1',
        sessionId: 's-1',
        agentId: 'buyer',
        toolName: 'book_flight',
        category: 'travel',
        quotedSpendUsd: 20,
        actualSpendUsd: 20,
      },
    });

    await open('Approvals', 'Pending approvals');
    await eventually(() => page.getByRole('status').first().textContent()).toBe('Live');
    const big = await h.call('/v1/economic/authorize', {
      method: 'POST',
      headers: key(),
      body: action('act-2', 75),
    });
    expect(big.decision).toBe('require_approval');
    const card = page.locator(`li[data-approval-id="${big.approvalId}"]`);
    await card.waitFor({ timeout: 5_000 });
    const bound = card.getByRole('definition');
    expect(await bound.allTextContents()).toEqual(['act-2', '$75', 'travel', 'corp-card', 'book_flight']);
    expect(await card.locator('[data-escalation="economic"]').textContent()).toMatch(
      /spend budgets.*\$75.*per-action approval threshold of \$50/,
    );
    expect(await card.textContent()).toMatch(/Agent buyer · Session s-1/);

    await h.call('/v1/gateway/packs/vendors', {
      method: 'PUT',
      headers: alice.userAuth,
      body: { allowed_rails: ['ach'], approval_threshold_usd: '100', quarantine_seconds: 0 },
    });
    // The capsule pays an invoice the agent handed in.
    const invoice = await h.call('/v1/gateway/invoices', {
      method: 'POST',
      headers: key(),
      body: {
        invoice_number: 'INV-7',
        payee: { name: 'Big Vendor', account_number: '12345678' },
        amount: { currency: 'USD', amount: '250.00' },
      },
    });
    const invoiceHash = invoice.invoice_hash as string;
    const mint = await fetch(`${h.base}/v1/gateway/capsules`, {
      method: 'POST',
      headers: { ...key(), 'content-type': 'application/json' },
      body: JSON.stringify({
        entity_id: 'acme',
        agent_id: 'buyer',
        pack_id: 'vendors',
        rails: ['ach'],
        beneficiary: { details: { name: 'Big Vendor', account_number: '12345678' } },
        amount_ceiling: { currency: 'USD', amount: '250.00' },
        invoice_hash: invoiceHash,
        ttl_seconds: 300,
      }),
    });
    expect(mint.status).toBe(409);
    const capsule = ((await mint.json()) as { error: { approval_id: string } }).error.approval_id;
    const gateway = page.locator(`li[data-approval-id="${capsule}"]`);
    await gateway.waitFor({ timeout: 5_000 });
    expect(await gateway.getByRole('definition').allTextContents()).toEqual([
      '250.00 USD',
      'big vendor, account …5678',
      'ach',
      invoiceHash,
      'acme',
    ]);
    expect(await gateway.locator('[data-escalation="gateway"]').textContent()).toMatch(
      /policy pack vendors, version 1.*approval_threshold_usd of 100/,
    );
    await shot('approvals-bound');

    await page.getByRole('button', { name: `Approve book_flight ${big.approvalId}` }).click();
    const row = page.locator(`tr[data-approval-id="${big.approvalId}"]`);
    await row.waitFor({ timeout: 5_000 });
    expect(await row.textContent()).toMatch(/approved.*alice \(you\)/);
    // The agent asks again with the approval: the spend is reserved.
    const approved = await h.call('/v1/economic/authorize', {
      method: 'POST',
      headers: key(),
      body: { ...action('act-2', 75), approvalId: big.approvalId },
    });
    expect(approved.decision).toBe('allow');
  }, 120_000);

  it('shows each budget with its limit, spent, reserved and remaining', async () => {
    await open('Budgets', 'Spend budgets');
    const limits = page.getByRole('table', { name: 'Configured limits' });
    await limits.waitFor();
    expect(await limits.locator('tbody tr').allTextContents()).toEqual([
      'Each action—$50—',
      'Session$500—the session',
      'Agent$1,000—day',
      'Category travel$300—day',
    ]);
    await page.getByLabel('Agent').fill('buyer');
    await page.getByLabel('Session').fill('s-1');
    await page.getByLabel('Category (optional)').fill('travel');
    await page.getByRole('button', { name: 'Show figures' }).click();
    const figures = page.getByRole('table', { name: 'Budget figures' });
    await figures.waitFor();
    const cells = async (scope: string) =>
      figures.locator(`tr[data-scope="${scope}"]`).locator('th, td').allTextContents();
    expect(await cells('session')).toEqual(['Session s-1', '$500', '$20', '$75', '$405']);
    expect(await cells('agent')).toEqual(['Agent buyer', '$1,000', '$20', '$75', '$905']);
    expect(await cells('category')).toEqual(['Category travel', '$300', '$20', '$75', '$205']);
    await shot('budgets');
  }, 120_000);

  it('talks with Charter and approves its proposed change from the review link', async () => {
    await h.call('/v1/tools/register', {
      method: 'POST',
      headers: key(),
      body: {
        tools: [
          {
            name: 'send_payment',
            description: 'Pays a recipient',
            parameters: [{ name: 'amount', type: 'number', required: true }],
          },
        ],
      },
    });
    await open('Charter', 'Charter');
    const chat = page.locator('ul.chat');
    // A question the rules cannot answer goes to the model (the local fake).
    await page.getByLabel('Message').fill('Who approves the changes you propose?');
    await page.getByLabel('Mode').selectOption('chat');
    await page.getByRole('button', { name: 'Send' }).click();
    await eventually(() => chat.locator('li.charter').first().textContent()).toContain(MODEL_ANSWER);

    await page.getByLabel('Message').fill('Block send_payment over $1,000');
    await page.getByLabel('Mode').selectOption('compile');
    await page.getByRole('button', { name: 'Send' }).click();
    const link = chat.getByRole('link', { name: 'Review the proposed change' });
    await link.waitFor();
    linkPath = (await link.getAttribute('href'))!;
    expect(linkPath).toMatch(/^\/charter\/verify\/[0-9a-f-]+\?token=/);
    await page.locator('[data-verification-id]').first().waitFor();
    await shot('charter');

    // The link as an email or chat would carry it: a fresh load of the server's URL.
    await page.goto(`${h.base}${linkPath}`);
    await page.getByRole('heading', { name: 'Review a policy change' }).waitFor();
    const change = page.getByRole('article', { name: 'Change to send_payment' });
    expect(await change.locator('.side > div').first().textContent()).toMatch(
      /^Now \(version 1\)"amount" is required$/,
    );
    expect(await change.locator('[data-proposed]').textContent()).toBe(
      'Proposed"amount" is required and is at most 1000',
    );
    await shot('charter-review');
    await page.getByRole('button', { name: 'Approve change' }).click();
    await eventually(() => page.locator('[data-status]').textContent()).toMatch(
      /^Approved by alice \(you\).*live as send_payment version 2/,
    );
    const after = await h.call('/v1/tools/validate', {
      method: 'POST',
      headers: key(),
      body: { tool_name: 'send_payment', arguments: { amount: 5000 } },
    });
    expect(after.decision).toBe('deny');
    expect(model.seen.length).toBe(1);
  }, 120_000);

  it('shows a person of another organization none of it', async () => {
    await page.goto(h.base);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to svc' }).waitFor();
    await h.signIn('mallory');
    await eventually(() => page.getByText('Nothing is waiting for a decision.').isVisible()).toBe(true);
    await open('Drafts', 'Policy drafts');
    await eventually(() => page.getByText('No agent has proposed a draft.').isVisible()).toBe(true);
    await open('Budgets', 'Spend budgets');
    await eventually(() => page.getByText(/No economic configuration/).isVisible()).toBe(true);
    await open('Charter', 'Charter');
    await eventually(() => page.getByText('No change is waiting.').isVisible()).toBe(true);
    // Even with alice's review link in hand.
    await page.goto(`${h.base}${linkPath}`);
    await page.getByRole('heading', { name: 'Change not found' }).waitFor();
    const peek = await page.evaluate(
      async ({ id, orgId }) =>
        (await fetch(`/v1/policy-drafts/${id}`, { headers: { 'x-organization-id': orgId } })).status,
      { id: draftId, orgId: alice.id },
    );
    expect(peek).toBe(403);
  }, 120_000);
});
