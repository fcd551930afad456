import type { Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DashboardHarness,
  eventually,
  openPage,
  startDashboard,
  whileFailing,
  whileHeld,
} from './dashboard.js';

/**
 * What the pages show before their lists are read, in a real browser against a real server process:
 * "Loading…" while a read is in flight (never "No X yet", which would claim there is nothing), the
 * empty state only after an answer, the error in its place when the read fails. And the decision
 * log's date filters on days the browser's time zone skipped or started after midnight.
 */
let h: DashboardHarness;
let page: Page;

const open = (label: string, heading: string) => openPage(page, label, heading);
/** The section (a panel of Settings) under the heading `title`. */
const section = (title: string) =>
  page.locator('section').filter({ has: page.getByRole('heading', { name: title, exact: true }) });
const busyIn = (where: ReturnType<Page['locator']>) => where.locator('[aria-busy="true"]');

beforeAll(async () => {
  h = await startDashboard();
  page = h.page;
  await h.organization('alice', 'alice-loading');
  await h.signIn('alice');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('lists not read yet', () => {
  it('says the API keys, upstreams and organization are loading, not that there are none', async () => {
    const reads = /\/v1\/(api-keys|mcp\/upstreams|organizations\/[^/?]+)(\?|$)/;
    await whileHeld(page, reads, async (release) => {
      await open('Settings', 'Settings');
      for (const title of ['Organization', 'API keys', 'MCP upstreams'])
        expect(await busyIn(section(title)).textContent(), title).toBe('Loading…');
      expect(await page.getByText('No upstream yet.').count()).toBe(0);
      expect(await page.getByText('No API key yet.').count()).toBe(0);
      release();
      // Answered: the empty state, and the lists that are not empty.
      await page.getByText('No upstream yet.').waitFor();
      await eventually(() => page.locator('tr[data-key-id]').count()).toBe(1);
      await eventually(() => page.locator('main [aria-busy="true"]').count()).toBe(0);
      expect(await page.locator('[data-plan]').textContent()).toBe('team');
    });
  }, 120_000);

  it('says why the API keys and upstreams could not be read, in their place', async () => {
    const busy = { status: 503, code: 'unavailable', message: 'The store is busy' };
    await whileFailing(page, '**/v1/api-keys', busy, () =>
      whileFailing(page, '**/v1/mcp/upstreams', busy, async () => {
        await open('Settings', 'Settings');
        for (const title of ['API keys', 'MCP upstreams']) {
          const alert = section(title).getByRole('alert');
          await alert.waitFor();
          expect(await alert.textContent()).toBe('The store is busy');
          // Said before the form, where the list goes, and said once.
          expect(await section(title).locator('.error').count()).toBe(1);
          expect(await busyIn(section(title)).count()).toBe(0);
        }
        expect(await page.getByText('No upstream yet.').count()).toBe(0);
        expect(await page.getByText('No API key yet.').count()).toBe(0);
      }),
    );
  }, 120_000);

  it('takes the error of a failed read away once the list is read again', async () => {
    const keys = section('API keys');
    await whileFailing(
      page,
      '**/v1/api-keys',
      { status: 503, code: 'unavailable', message: 'The store is busy' },
      async () => {
        await open('Settings', 'Settings');
        await keys.getByRole('alert').waitFor();
      },
    );
    // A new project comes with a key: the key list is read again, by the page itself (no action of
    // the list's own, which would clear its error anyway), and this time it answers.
    await page.getByLabel('New project name').fill('Read again');
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await eventually(() => keys.locator('tr[data-key-id]').count()).toBe(2);
    await eventually(() => keys.getByText('The store is busy').count()).toBe(0);
  }, 120_000);

  it('says the policies and the decisions are loading, then that there are none', async () => {
    await whileHeld(page, '**/v1/policies', async (release) => {
      await open('Policies', 'Policies');
      expect(await busyIn(page.locator('main')).textContent()).toBe('Loading…');
      expect(await page.getByText(/^No policy yet/).count()).toBe(0);
      release();
      await page.getByText(/^No policy yet/).waitFor();
      expect(await busyIn(page.locator('main')).count()).toBe(0);
    });
    await whileHeld(page, /\/v1\/decisions\?/, async (release) => {
      await open('Decisions', 'Decisions');
      expect(await busyIn(page.locator('main')).textContent()).toBe('Loading…');
      expect(await page.getByText('No decision matches.').count()).toBe(0);
      release();
      await page.getByText('No decision matches.').waitFor();
      expect(await busyIn(page.locator('main')).count()).toBe(0);
    });
  }, 120_000);

  it('says the organizations are loading before any page shows', async () => {
    await whileHeld(page, /\/v1\/organizations(\?|$)/, async (release) => {
      await page.reload();
      await page.getByRole('navigation', { name: 'Main' }).waitFor();
      expect(await busyIn(page.locator('main')).textContent()).toBe('Loading…');
      // No page of the organization until it is known.
      expect(await page.locator('main h1').count()).toBe(0);
      release();
      await page.locator('main h1').first().waitFor();
    });
  }, 120_000);
});

describe('the date filters on days the time zone skipped', () => {
  /** Applies From and To in time zone `zone`; the decision reads the page sent meanwhile. */
  async function applyIn(zone: string, from: string, to: string): Promise<string[]> {
    const sent: string[] = [];
    const onRequest = (r: Request) => {
      const url = new URL(r.url());
      // Only reads of the dates applied: not the page's own refreshes (the event stream connecting,
      // the poll), which read the list with the filters it had.
      if (
        url.pathname === '/v1/decisions' &&
        (url.searchParams.has('startDate') || url.searchParams.has('endDate'))
      )
        sent.push(url.search);
    };
    const cdp = await h.context.newCDPSession(page);
    try {
      await cdp.send('Emulation.setTimezoneOverride', { timezoneId: zone });
      await open('Decisions', 'Decisions');
      await page.getByText('No decision matches.').waitFor();
      // Connected: the read the stream's connection makes is done before the dates are applied.
      await eventually(() => page.locator('.heading [role=status]').textContent()).toBe('Live');
      page.on('request', onRequest);
      await page.getByLabel('From', { exact: true }).fill(from);
      await page.getByLabel('To', { exact: true }).fill(to);
      await page.getByRole('button', { name: 'Apply filters' }).click();
      await eventually(
        async () =>
          (await page.getByRole('alert').count()) > 0 ||
          (sent.length > 0 && (await page.getByText('No decision matches.').count()) > 0),
      ).toBe(true);
      return sent;
    } finally {
      page.off('request', onRequest);
      await cdp.send('Emulation.setTimezoneOverride', { timezoneId: '' });
      await cdp.detach();
    }
  }

  it('says a day that does not exist in the zone does not, and asks the service nothing', async () => {
    // Samoa went from 29 to 31 December 2011.
    const sent = await applyIn('Pacific/Apia', '2011-12-30', '2011-12-30');
    expect(await page.getByRole('alert').textContent()).toBe(
      '2011-12-30 does not exist in your time zone (Pacific/Apia): its clocks skipped that day, so no decision can match. Choose another day.',
    );
    expect(sent).toEqual([]);
    expect(await page.getByText('No decision matches.').count()).toBe(0);
    expect(await page.locator('main [aria-busy="true"]').count()).toBe(0);
    await page.getByRole('button', { name: 'Clear' }).click();
    await page.getByText('No decision matches.').waitFor();
  }, 120_000);

  it('starts a day whose midnight the zone skipped at its first hour', async () => {
    // Santiago went from 23:59:59 on 10 September 2022 to 01:00 on the 11th (UTC-4 to UTC-3).
    const sent = await applyIn('America/Santiago', '2022-09-11', '2022-09-11');
    expect(sent.map((s) => Object.fromEntries(new URLSearchParams(s)))).toEqual([
      expect.objectContaining({
        startDate: '2022-09-11T04:00:00.000Z',
        endDate: '2022-09-12T02:59:59.999Z',
      }),
    ]);
    expect(await page.getByRole('alert').count()).toBe(0);
    await page.getByRole('button', { name: 'Clear' }).click();
  }, 120_000);
});
