import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHarness, eventually, startDashboard } from './dashboard.js';
import { type SignInProvider, startSignInProvider } from './oidc-sign-in-provider.js';

/**
 * Sign-in to the dashboard through an OpenID Connect provider, in a real browser (Debian's
 * Chromium) against a real server process: the sign-in page offers the provider, the provider's
 * login page names the person, and the dashboard opens signed in as them.
 */
let idp: SignInProvider;
let h: DashboardHarness;
let base: string;

beforeAll(async () => {
  h = await startDashboard(async (address) => {
    idp = await startSignInProvider(`${address}/v1/auth/oidc/callback`);
    return {
      SVC_OIDC_ISSUER: idp.issuer,
      SVC_OIDC_CLIENT_ID: idp.clientId,
      SVC_OIDC_CLIENT_SECRET: idp.clientSecret,
      SVC_OIDC_NAME: 'Example IdP',
    };
  });
  base = h.base;
}, 120_000);

afterAll(async () => {
  await h?.close();
  await idp?.stop();
});

describe('dashboard sign-in through an OpenID Connect provider', () => {
  it('signs a person in with the provider, keyboard only', async () => {
    const page = h.page;
    await page.goto(base);
    const button = page.getByRole('link', { name: 'Sign in with Example IdP' });
    await eventually(() => button.isVisible()).toBe(true);
    await button.focus();
    await page.keyboard.press('Enter');

    // At the provider: its own login page.
    const user = page.getByLabel('User name');
    await eventually(() => user.isVisible()).toBe(true);
    expect(page.url().startsWith(idp.issuer)).toBe(true);
    await user.fill('olivia');
    await page.keyboard.press('Enter');

    // Back on the dashboard, signed in as the ID token's subject.
    await eventually(() => page.url()).toBe(`${base}/`);
    await eventually(() => page.locator('.who').textContent()).toBe('olivia');
    const session = await page.evaluate(() =>
      fetch('/v1/auth/session').then((r) => r.json() as Promise<{ userId: string }>),
    );
    expect(session.userId).toBe('olivia');
  });

  it('shows why a sign-in failed', async () => {
    const page = await h.context.newPage();
    await page.goto(`${base}/v1/auth/oidc/callback?state=forged&code=x`);
    await eventually(() => page.url()).toBe(`${base}/?signin=invalid`);
    await page.context().clearCookies();
    await page.goto(`${base}/?signin=invalid`);
    await eventually(() => page.getByRole('alert').textContent()).toMatch(/did not work/);
    await page.close();
  });
});
