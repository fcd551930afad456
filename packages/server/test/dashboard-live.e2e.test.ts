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
  await page.goto(await h.loginLink('alice'));
  await page.getByRole('heading', { name: 'Pending approvals' }).waitFor();
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
