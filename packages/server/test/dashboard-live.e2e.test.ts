import type { Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHarness, eventually, type Organization, startDashboard } from './dashboard.js';

/**
 * The Decisions page follows the organization's event stream in a real browser against a real
 * server process: decisions made through the API appear without a reload, under the filters shown,
 * a burst costs a couple of reads, and a person reading a later page or a decision's details is not
 * moved (the new decisions are offered instead).
 */
let h: DashboardHarness;
let page: Page;
let org: Organization;
let other: Organization;

const validate = async (apiKey: string, tool: string, args: Record<string, unknown> = {}): Promise<string> =>
  (
    await h.call('/v1/tools/validate', {
      method: 'POST',
      headers: { 'x-service-api-key': apiKey },
      body: { tool_name: tool, arguments: args },
    })
  ).metadata.decision_id;

/** `n` client decisions in one request (one event each). */
const logMany = (n: number, tool: string) =>
  h.call('/v1/decisions', {
    method: 'POST',
    headers: { 'x-service-api-key': org.apiKey },
    body: Array.from({ length: n }, (_, i) => ({
      tool_name: tool,
      arguments: { i },
      decision: 'allow',
      mode: 'deterministic',
      latency_ms: 1,
      source: 'client',
    })),
  });

const rowIds = () =>
  page
    .locator('tr[data-decision-id]')
    .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-decision-id')));
const range = () => page.locator('[data-range]').textContent();
const status = () => page.locator('.heading [role=status]').textContent();
const announced = () => page.locator('[data-announcer]').textContent();
const total = async () =>
  (await h.call('/v1/decisions?limit=1', { headers: { 'x-service-api-key': org.apiKey } })).pagination
    .total as number;

/** Marks the document: still marked later means the page was not reloaded. */
const mark = () => page.locator('html').evaluate((html) => html.setAttribute('data-not-reloaded', ''));
const stillMarked = async () => (await page.locator('html[data-not-reloaded]').count()) === 1;

async function openDecisions() {
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Decisions' }).click();
  await page.getByRole('heading', { name: 'Decisions', exact: true }).waitFor();
  await eventually(status).toBe('Live');
}

beforeAll(async () => {
  h = await startDashboard();
  page = h.page;
  org = await h.organization('alice', 'alice-live');
  other = await h.organization('mallory', 'mallory-live');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the Decisions page, live', () => {
  it('shows decisions made through the API as they are made, without a reload, and says so politely', async () => {
    await openDecisions();
    await eventually(() => page.getByText('No decision matches.').isVisible()).toBe(true);
    await mark();

    const first = await validate(org.apiKey, 'wire', { amount: 5 });
    await eventually(rowIds).toEqual([first]);
    await eventually(announced).toBe('1 new decision: wire.');
    const second = await validate(org.apiKey, 'wire', { amount: 6 });
    const third = await validate(org.apiKey, 'pay', { amount: 7 });
    await eventually(rowIds).toEqual([third, second, first]);
    expect(await range()).toBe('1–3 of 3');
    // The two later ones are said together, within the live region's pause.
    await eventually(announced).toMatch(/^2 new decisions: (pay, wire|wire, pay)\.$/);
    expect(await stillMarked()).toBe(true);
  }, 120_000);

  it("follows the filters shown, and never another organization's decisions", async () => {
    await openDecisions();
    await page.getByLabel('Tool', { exact: true }).fill('pay');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await eventually(() => page.locator('tr[data-decision-id]').count()).toBe(1);

    await validate(org.apiKey, 'wire', { amount: 1 });
    await validate(other.apiKey, 'pay', { amount: 1 });
    const pay = await validate(org.apiKey, 'pay', { amount: 2 });
    await eventually(async () => (await rowIds())[0]).toBe(pay);
    expect(await page.locator('td.tool .name').allTextContents()).toEqual(['pay', 'pay']);
    expect(await range()).toBe('1–2 of 2');

    await page.getByRole('button', { name: 'Clear' }).click();
    await eventually(range).toBe(`1–${await total()} of ${await total()}`);
  }, 120_000);

  it('reads the list at most about once a second through a burst of decisions', async () => {
    await openDecisions();
    const before = await total();
    const reads: string[] = [];
    const onRequest = (r: Request) => {
      if (new URL(r.url()).pathname === '/v1/decisions') reads.push(r.url());
    };
    page.on('request', onRequest);
    const started = Date.now();
    try {
      await logMany(120, 'batch_tool');
      await eventually(range).toBe(`1–50 of ${before + 120}`);
      await page.waitForTimeout(2500);
    } finally {
      page.off('request', onRequest);
    }
    // 120 events: at most one read a second while they arrive (a loaded machine spreads them over
    // more seconds), plus perhaps one poll; never one per event.
    const seconds = Math.ceil((Date.now() - started) / 1000);
    expect(reads.length).toBeGreaterThanOrEqual(1);
    expect(reads.length).toBeLessThanOrEqual(seconds + 2);
    expect(reads.length).toBeLessThan(120);
  }, 120_000);

  it('keeps a person on page 2 where they are, and offers the new decisions', async () => {
    await openDecisions();
    await mark();
    const n = await total();
    const first = await rowIds();
    // A slow read of page 2: until its rows are in, the range still names the rows shown.
    let slowed: Promise<void> | undefined;
    await page.route('**/v1/decisions?*offset=50*', (route) => {
      slowed = new Promise((r) => setTimeout(r, 400)).then(() => route.continue());
      return slowed;
    });
    try {
      await page.getByRole('button', { name: 'Older' }).click();
      await eventually(range).toBe(`51–100 of ${n}`);
    } finally {
      await slowed;
      await page.unroute('**/v1/decisions?*offset=50*');
    }
    const shown = await rowIds();
    expect(shown.filter((id) => first.includes(id))).toEqual([]);

    const a = await validate(org.apiKey, 'wire', { amount: 8 });
    const b = await validate(org.apiKey, 'wire', { amount: 9 });
    const offer = page.getByRole('button', { name: 'Show 2 new decisions' });
    await eventually(() => offer.isVisible()).toBe(true);
    // Nothing moved: the same rows, the same range and total.
    expect(await rowIds()).toEqual(shown);
    expect(await range()).toBe(`51–100 of ${n}`);
    await eventually(announced).toMatch(/2 new decisions not shown yet\.$/);

    await offer.click();
    await eventually(range).toBe(`1–50 of ${n + 2}`);
    expect((await rowIds()).slice(0, 2)).toEqual([b, a]);
    expect(await offer.count()).toBe(0);
    expect(await stillMarked()).toBe(true);
  }, 120_000);

  it("keeps an open decision's details in place, and brings the new ones in when they close", async () => {
    await openDecisions();
    const [top] = await rowIds();
    const receipt = page.getByRole('button', { name: `Receipt of wire ${top}` });
    await receipt.click();
    await page.locator('[data-receipt]').waitFor();

    const fresh = await validate(org.apiKey, 'wire', { amount: 10 });
    await eventually(() => page.getByRole('button', { name: 'Show 1 new decision' }).isVisible()).toBe(true);
    expect((await rowIds())[0]).toBe(top);
    expect(await page.locator('[data-receipt]').isVisible()).toBe(true);

    await receipt.click();
    await eventually(async () => (await rowIds())[0]).toBe(fresh);
    expect(await page.getByRole('button', { name: /^Show \d+ new decision/ }).count()).toBe(0);
  }, 120_000);

  it('says when it polls instead of following the stream, and follows it again once it can', async () => {
    await page.route('**/v1/events/stream*', (route) => route.abort('connectionrefused'));
    try {
      await page.goto(`${h.base}/decisions`);
      await page.getByRole('heading', { name: 'Decisions', exact: true }).waitFor();
      await eventually(status).toBe('Refreshing every 15 s');
    } finally {
      await page.unroute('**/v1/events/stream*');
    }
    await eventually(status).toBe('Live');
    const id = await validate(org.apiKey, 'wire', { amount: 11 });
    await eventually(async () => (await rowIds())[0]).toBe(id);
  }, 120_000);
});

describe('the Drafts page, live', () => {
  const agent = () => ({ 'x-service-api-key': org.apiKey });
  const rule = (max: number) => ({
    id: 'cap',
    action: 'allow',
    tools: ['pay'],
    conditions: [{ field: 'arguments.amount', operator: 'less_than_or_equal', value: max }],
    severity: 'high',
  });
  /** A draft written and submitted by the agent's key, as agents do; its id. */
  const propose = async (name: string, max: number): Promise<string> => {
    const { data } = await h.call('/v1/policy-drafts', {
      method: 'POST',
      headers: agent(),
      body: { name, projectId: org.projectId, createdByAgentId: 'policy-bot', rules: [rule(max)] },
    });
    await h.call(`/v1/policy-drafts/${data.id}/submit`, { method: 'POST', headers: agent() });
    return data.id;
  };
  const card = (id: string) => page.locator(`li[data-draft-id="${id}"]`);
  /**
   * Well within the 15 s poll of a page just opened: what shows by then came with the event stream,
   * not with the poll.
   */
  const BY_EVENT = { timeout: 8_000 };

  async function openDrafts() {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Approvals' }).click();
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Drafts' }).click();
    await page.getByRole('heading', { name: 'Policy drafts', exact: true }).waitFor();
    await eventually(status).toBe('Live');
  }

  it('shows a draft submitted through the API without a reload, and keeps what the person was doing when someone else rejects it', async () => {
    await openDrafts();
    await page.getByText('No agent has proposed a draft.').waitFor();
    await mark();

    const id = await propose('Small payments', 100);
    await card(id).waitFor(BY_EVENT);
    await eventually(() => card(id).locator('.left').textContent()).toBe('Waiting for review');
    await eventually(announced).toBe('1 new draft waiting for review.');

    // The person works on the card: a replay count typed, a replay run.
    await card(id).getByLabel('Recent decisions to replay').fill('7');
    await card(id).getByRole('button', { name: 'Replay against decisions' }).click();
    await card(id).locator('[data-replay]').waitFor();

    // Another reviewer (a reviewer key relaying someone's click) rejects it meanwhile.
    await h.call(`/v1/policy-drafts/${id}/reject`, { method: 'POST', headers: agent() });
    await eventually(() => card(id).locator('.left').textContent()).toBe('Rejected');
    expect(await card(id).locator('[data-draft-note]').textContent()).toMatch(
      /^Rejected by apikey:\S+ on .+, since you read it\.$/,
    );
    await eventually(announced).toMatch(/^Small payments: Rejected by apikey:/);
    expect(await card(id).getByRole('button', { name: 'Approve draft' }).count()).toBe(0);
    // What the person was doing is still there.
    expect(await card(id).getByLabel('Recent decisions to replay').inputValue()).toBe('7');
    expect(await card(id).locator('[data-replay]').isVisible()).toBe(true);
    expect(await stillMarked()).toBe(true);
  }, 120_000);

  it('keeps the rules the person read of a draft edited since, until they ask for the current version', async () => {
    await openDrafts();
    const id = await propose('Medium payments', 300);
    await card(id).waitFor(BY_EVENT);
    const when = () => card(id).locator('tbody tr').first().textContent();
    expect(await when()).toMatch(/less than or equal 300/);

    // The agent withdraws it, rewrites it and submits it again.
    await h.call(`/v1/policy-drafts/${id}`, { method: 'PATCH', headers: agent(), body: { status: 'draft' } });
    await h.call(`/v1/policy-drafts/${id}`, {
      method: 'PATCH',
      headers: agent(),
      body: { rules: [rule(900)] },
    });
    await h.call(`/v1/policy-drafts/${id}/submit`, { method: 'POST', headers: agent() });
    await card(id).locator('[data-draft-held="edited"]').waitFor(BY_EVENT);
    expect(await when()).toMatch(/less than or equal 300/);
    await eventually(announced).toBe('Medium payments was edited since you read it.');

    await card(id).getByRole('button', { name: 'Show the current version' }).click();
    await eventually(when).toMatch(/less than or equal 900/);
    expect(await card(id).locator('[data-draft-held]').count()).toBe(0);
    // The button went with the notice: the focus is on the card, not lost to the page.
    expect(await page.evaluate(`document.activeElement?.getAttribute('data-draft-id')`)).toBe(id);
  }, 120_000);

  it('reads the drafts about once a second through a burst of events, never once each', async () => {
    await openDrafts();
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await propose(`Burst ${i}`, 10 + i));
    for (const id of ids) await card(id).waitFor(BY_EVENT);
    const reads: string[] = [];
    const onRequest = (r: Request) => {
      if (new URL(r.url()).pathname === '/v1/policy-drafts') reads.push(r.url());
    };
    page.on('request', onRequest);
    const started = Date.now();
    try {
      // Eight events at once.
      await Promise.all(
        ids.map((id) => h.call(`/v1/policy-drafts/${id}/reject`, { method: 'POST', headers: agent() })),
      );
      for (const id of ids) await eventually(() => card(id).locator('.left').textContent()).toBe('Rejected');
    } finally {
      page.off('request', onRequest);
    }
    // At most one read a second while they arrive (and one that a late event of the submissions
    // above, or the poll, may add); never one per event.
    const seconds = Math.ceil((Date.now() - started) / 1000);
    expect(reads.length).toBeGreaterThanOrEqual(1);
    expect(reads.length).toBeLessThanOrEqual(seconds + 2);
    expect(reads.length).toBeLessThan(ids.length);
  }, 120_000);
});
