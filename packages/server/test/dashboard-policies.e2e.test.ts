import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHarness, eventually, type Organization, startDashboard } from './dashboard.js';
import { gate } from './helpers.js';

/**
 * The policy editor in a real browser against a real server process: a save over a version someone
 * else replaced since the editor opened it is refused and shown (the person's text kept), and every
 * tool name, `new` included, has its own editor.
 */
let h: DashboardHarness;
let page: Page;
let org: Organization;

const key = () => ({ 'x-service-api-key': org.apiKey });
const limit = (maximum: number) => ({ argumentName: 'amount', maximum });
const policyOf = (tool: string) => h.call(`/v1/policies/${encodeURIComponent(tool)}`, { headers: key() });
const put = (tool: string, constraints: object[]) =>
  h.call(`/v1/policies/${encodeURIComponent(tool)}`, {
    method: 'PUT',
    headers: key(),
    body: { constraints },
  });
const create = (tool: string, constraints: object[]) =>
  h.call('/v1/policies', { method: 'POST', headers: key(), body: { toolName: tool, constraints } });
const textOf = (selector: string) => () => page.locator(selector).first().textContent();
const definition = () => page.getByLabel('Definition');
const pathname = () => new URL(page.url()).pathname;

/** Opens a dashboard path as a link from elsewhere would (a full page load). */
async function open(path: string) {
  await page.goto(`${h.base}${path}`);
}

/** Replaces the editor's text and waits until the page judged it valid. */
async function type(value: object) {
  await definition().fill(JSON.stringify(value, null, 2));
  await eventually(textOf('.quality')).toMatch(/^Valid/);
}

beforeAll(async () => {
  h = await startDashboard();
  page = h.page;
  org = await h.organization('carol', 'carol-policies');
  await h.signIn('carol');
}, 120_000);

afterAll(async () => {
  await h?.close();
});

describe('the policy editor', () => {
  it('refuses to save over a version saved since it was opened, shows it, and keeps the text', async () => {
    await create('wire', [limit(100)]);
    await put('wire', [limit(90)]);
    await put('wire', [limit(80)]);
    await open('/policies/wire');
    await eventually(() => page.getByText('version 3 · active').isVisible()).toBe(true);
    expect(JSON.parse(await definition().inputValue()).constraints).toEqual([
      { ...limit(80), enabled: true },
    ]);

    // Meanwhile an agent saves version 4 by API, adding a deny rule.
    const deny = { argumentName: 'to', notEnum: ['mallory'] };
    await put('wire', [limit(80), deny]);

    // The person's edit, based on version 3: refused, and nothing is lost on either side.
    const mine = { mode: 'deterministic', constraints: [limit(50)] };
    await type(mine);
    await page.getByRole('button', { name: 'Save' }).click();
    const conflict = page.getByRole('alert').filter({ hasText: 'changed since you opened it' });
    await eventually(() => conflict.isVisible()).toBe(true);
    expect(await conflict.textContent()).toMatch(
      /based on version 3; version 4 is current now.*Nothing was saved\. Your text is still in the editor/,
    );
    expect(JSON.parse((await page.locator('pre[data-current-version="4"]').textContent()) ?? '')).toEqual({
      mode: 'deterministic',
      constraints: [
        { ...limit(80), enabled: true },
        { ...deny, enabled: true },
      ],
    });
    expect(JSON.parse(await definition().inputValue())).toEqual(mine);
    expect(await page.getByText(/Saved as version/).count()).toBe(0);
    const after = await policyOf('wire');
    expect(after.version).toBe(4);
    expect(after.constraints).toContainEqual({ ...deny, enabled: true });
    // The history shows the version the person had not seen.
    await eventually(() => page.locator('.versions > li[data-version="4"]').count()).toBe(1);

    // Saving again without deciding is refused again: the page still sends version 3's ETag.
    // The policy's read after the refusal is held: until it has answered, the choices wait (taken
    // before, that read would undo them).
    const { opened: released, open: release } = gate();
    let held = false;
    await page.route('**/v1/policies/wire', async (route) => {
      if (route.request().method() !== 'GET' || held) return route.fallback();
      held = true;
      await released;
      await route.fallback();
    });
    const keep = page.getByRole('button', { name: 'Keep my text, based on version 4' });
    const [again] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().endsWith('/v1/policies/wire')),
      page.getByRole('button', { name: 'Save' }).click(),
    ]);
    expect(again.status()).toBe(409);
    expect(again.request().headers()['if-match']).toMatch(/^"v3-[0-9a-f]{32}"$/);
    expect((await policyOf('wire')).version).toBe(4);
    await eventually(() => held).toBe(true);
    expect(await keep.isDisabled()).toBe(true);
    release();
    await page.unroute('**/v1/policies/wire');
    await eventually(() => keep.isEnabled()).toBe(true);
    await eventually(() => conflict.isVisible()).toBe(true);

    // The person keeps their text, knowingly based on version 4 now, and saves it.
    await keep.click();
    // The page renders after the click has returned: read it until it has.
    await eventually(() => conflict.count()).toBe(0);
    expect(JSON.parse(await definition().inputValue())).toEqual(mine);
    await page.getByRole('button', { name: 'Save' }).click();
    await eventually(() => page.getByText('Saved as version 5.').isVisible()).toBe(true);
    expect(await policyOf('wire')).toMatchObject({
      version: 5,
      constraints: [{ ...limit(50), enabled: true }],
    });
    await eventually(() => page.getByText('version 5 · active').isVisible()).toBe(true);

    // Another change meanwhile; this time the person takes the current version instead.
    await put('wire', [limit(60), deny]);
    await type({ mode: 'deterministic', constraints: [limit(1)] });
    await page.getByRole('button', { name: 'Deactivate' }).click();
    await eventually(() => conflict.isVisible()).toBe(true);
    expect(await conflict.textContent()).toMatch(
      /version 6 is current now.*The policy was not deactivated\./,
    );
    expect((await policyOf('wire')).isActive).toBe(true);
    await page.getByRole('button', { name: 'Discard my text and load version 6' }).click();
    await eventually(async () => JSON.parse(await definition().inputValue())).toEqual({
      mode: 'deterministic',
      constraints: [
        { ...limit(60), enabled: true },
        { ...deny, enabled: true },
      ],
    });
    await eventually(() => page.getByText('version 6 · active').isVisible()).toBe(true);
    await page.getByRole('button', { name: 'Deactivate' }).click();
    await eventually(() => page.getByText('version 6 · inactive').isVisible()).toBe(true);
    expect(await policyOf('wire')).toMatchObject({ version: 6, isActive: false });
  }, 120_000);

  it('opens the policy of a tool named new, and every other name, at its own path', async () => {
    // No policy yet: the page says so and offers the form with the name filled in.
    await open('/policies/new');
    await eventually(() => page.getByText('There is no policy for new.').isVisible()).toBe(true);
    expect(await page.getByRole('heading', { name: 'New policy' }).count()).toBe(0);
    await page.getByRole('link', { name: 'Create a policy for new' }).click();
    await page.getByRole('heading', { name: 'New policy' }).waitFor();
    expect(pathname()).toBe('/policies/-/new');
    expect(await page.getByLabel('Tool name').inputValue()).toBe('new');
    await type({ mode: 'deterministic', constraints: [limit(7)] });
    await page.getByRole('button', { name: 'Create policy' }).click();
    await eventually(() => page.getByRole('heading', { name: 'Policy for new' }).isVisible()).toBe(true);
    expect(pathname()).toBe('/policies/new');
    expect(await policyOf('new')).toMatchObject({
      version: 1,
      constraints: [{ ...limit(7), enabled: true }],
    });

    // From the list, each name opens its own editor; `New policy` opens the form.
    const names = ['-/new', '-', 'a/b', '100%', 'new policy'];
    for (const name of names) await create(name, [limit(names.indexOf(name) + 1)]);
    await page.getByRole('link', { name: 'All policies' }).click();
    for (const name of ['new', ...names]) {
      await page.locator(`tr[data-policy="${name}"]`).getByRole('link', { name, exact: true }).click();
      await eventually(() => page.getByRole('heading', { name: `Policy for ${name}` }).isVisible()).toBe(
        true,
      );
      expect(pathname()).toBe(`/policies/${encodeURIComponent(name)}`);
      const stored = await policyOf(name);
      await eventually(
        async () => JSON.parse((await definition().inputValue()) || 'null')?.constraints,
      ).toEqual(stored.constraints);
      await page.getByRole('link', { name: 'All policies' }).click();
      await page.locator('tr[data-policy]').first().waitFor();
    }
    await page.getByRole('link', { name: 'New policy', exact: true }).click();
    await page.getByRole('heading', { name: 'New policy' }).waitFor();
    expect(pathname()).toBe('/policies/-/new');
    expect(await page.getByLabel('Tool name').inputValue()).toBe('');

    // The editor of `new` saves like any other (with its ETag), from a full page load too.
    await open('/policies/new');
    await eventually(() => page.getByText('version 1 · active').isVisible()).toBe(true);
    await type({ mode: 'deterministic', constraints: [limit(8)] });
    await page.getByRole('button', { name: 'Save' }).click();
    await eventually(() => page.getByText('Saved as version 2.').isVisible()).toBe(true);
    expect(await policyOf('new')).toMatchObject({
      version: 2,
      constraints: [{ ...limit(8), enabled: true }],
    });
  }, 120_000);

  it('shows a policy deleted elsewhere as gone once a write is refused, and creates it again from the text kept', async () => {
    await create('refund', [limit(100)]);
    await open('/policies/refund');
    await eventually(() => page.getByText('version 1 · active').isVisible()).toBe(true);
    // Meanwhile the policy is deleted by API; the person edits and saves.
    await h.call('/v1/policies/refund', { method: 'DELETE', headers: key() });
    const mine = { mode: 'deterministic', constraints: [limit(30)] };
    await type(mine);
    await page.getByRole('button', { name: 'Save' }).click();
    const gone = page.getByRole('alert').filter({ hasText: 'was deleted since you opened it' });
    await eventually(() => gone.isVisible()).toBe(true);
    expect(await gone.textContent()).toBe(
      "Nothing was saved. The policy for refund was deleted since you opened it: the tool has no policy now, so every call of it is allowed. Your text is still in the editor; Create policy saves it as the tool's new policy.",
    );
    // The page shows the tool as it is now: no policy, nothing to save over, activate or delete.
    expect(await page.locator('[data-no-policy]').textContent()).toBe('no policy');
    expect(await page.getByText(/version 1 · (in)?active/).count()).toBe(0);
    for (const name of ['Save', 'Deactivate', 'Activate', 'Delete'])
      expect(await page.getByRole('button', { name, exact: true }).count(), name).toBe(0);
    expect(await page.locator('.versions summary', { hasText: '(current)' }).count()).toBe(0);
    expect(JSON.parse(await definition().inputValue())).toEqual(mine);

    // Create policy: the text is the tool's policy again, and the editor works on it as on any other,
    // also when the page's read of it right after fails (the created version is its base).
    const readBack = /\/v1\/policies\/refund(\?|$)/;
    await page.route(readBack, (route) =>
      route.request().method() === 'GET' ? route.abort() : route.continue(),
    );
    await page.getByRole('button', { name: 'Create policy' }).click();
    await eventually(() => page.getByText('version 1 · active').isVisible()).toBe(true);
    await page.unroute(readBack);
    expect(await page.getByText('Created as version 1.').isVisible()).toBe(true);
    expect(await gone.count()).toBe(0);
    expect(await policyOf('refund')).toMatchObject({
      version: 1,
      constraints: [{ ...limit(30), enabled: true }],
    });
    await eventually(() => page.locator('.versions summary', { hasText: '(current)' }).count()).toBe(1);
    const second = { mode: 'deterministic', constraints: [limit(20)] };
    await type(second);
    await page.getByRole('button', { name: 'Save' }).click();
    await eventually(() => page.getByText('Saved as version 2.').isVisible()).toBe(true);

    // Deleted again: a refused Deactivate says so too. Then someone creates a policy for the tool
    // before the person does: their Create is refused, and the new policy shown beside their text.
    await h.call('/v1/policies/refund', { method: 'DELETE', headers: key() });
    await page.getByRole('button', { name: 'Deactivate' }).click();
    await eventually(() => gone.textContent()).toMatch(
      /^The policy was not deactivated\. The policy for refund was deleted since you opened it/,
    );
    await create('refund', [limit(5)]);
    await page.getByRole('button', { name: 'Create policy' }).click();
    const conflict = page.getByRole('alert').filter({ hasText: 'changed since you opened it' });
    await eventually(() => conflict.isVisible()).toBe(true);
    expect(await conflict.textContent()).toMatch(
      /based on a policy deleted since; a new one was created: version 1 is current now.*Nothing was saved\. Your text is still in the editor/,
    );
    expect((await policyOf('refund')).constraints).toEqual([{ ...limit(5), enabled: true }]);
    await page.getByRole('button', { name: 'Keep my text, based on version 1' }).click();
    await eventually(() => conflict.count()).toBe(0);
    expect(JSON.parse(await definition().inputValue())).toEqual(second);
    await page.getByRole('button', { name: 'Save' }).click();
    await eventually(() => page.getByText('Saved as version 2.').isVisible()).toBe(true);
    expect(await policyOf('refund')).toMatchObject({
      version: 2,
      constraints: [{ ...limit(20), enabled: true }],
    });
  }, 120_000);
});
