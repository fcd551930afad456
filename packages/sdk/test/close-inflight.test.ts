import { type ClientOptions, createClient, FlushError, SvcError } from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asUser, type Tenant, type TestApp } from '../../server/test/helpers.js';
import { createTenant, putPolicy, startServer } from './live.js';

let t: TestApp;
let baseUrl: string;
beforeAll(async () => {
  ({ t, baseUrl } = await startServer());
});
afterAll(async () => t.close());

const PAY = { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] };

async function tenantWithPolicies(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', PAY);
  await putPolicy(t, tenant, 'slow', PAY);
  return tenant;
}

async function recorded(tenant: Tenant): Promise<string[]> {
  const page = await t.inject({ method: 'GET', url: '/v1/decisions?limit=100', headers: asUser(tenant) });
  return page.json().data.map((d: { toolName: string }) => d.toolName);
}

/**
 * A client whose read of the `slow` policy waits for open(); the decision log answers 503 while
 * `logDown`. `posts` counts the log's requests.
 */
function slowPolicyClient(tenant: Tenant, logDown: boolean, options: Partial<ClientOptions> = {}) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const state = { posts: 0, errors: [] as Error[] };
  const client = createClient({
    apiKey: tenant.apiKey,
    baseUrl,
    live: false,
    onError: (e) => state.errors.push(e),
    ...options,
    fetch: async (input, init) => {
      const url = String(input);
      if (url.endsWith('/v1/decisions') && init?.method === 'POST') {
        state.posts++;
        if (logDown) {
          return new Response(JSON.stringify({ error: { code: 'service_unavailable', message: 'down' } }), {
            status: 503,
            headers: { 'content-type': 'application/json' },
          });
        }
      }
      if (url.includes('/v1/policies/slow')) await gate;
      return fetch(input, init);
    },
  });
  return { client, open, state };
}

describe('a call still being decided when close() runs', () => {
  it('is waited for: its local answer is among the decisions close() hands back', async () => {
    const tenant = await tenantWithPolicies();
    const { client, open } = slowPolicyClient(tenant, true, { closeTimeoutMs: 1000 });
    expect((await client.validate('pay', { amount: 1 })).source).toBe('local');
    const inFlight = client.validate('slow', { amount: 2 });
    const closing = client.close().then(
      () => null,
      (e: unknown) => e,
    );
    setTimeout(open, 200);
    const r = await inFlight;
    expect(r).toMatchObject({ decision: 'allow', source: 'local' });
    const err = await closing;
    expect(err).toBeInstanceOf(FlushError);
    const pending = (err as FlushError).pending.map((b) => JSON.parse(b).tool_name);
    expect(pending).toEqual(['pay', 'slow']);
  });

  it('is waited for: close() resolves once its local decision is recorded', async () => {
    const tenant = await tenantWithPolicies();
    const { client, open } = slowPolicyClient(tenant, false);
    const inFlight = client.validate('slow', { amount: 2 });
    let answered = false;
    void inFlight.then(() => {
      answered = true;
    });
    setTimeout(open, 200);
    await client.close();
    expect(answered).toBe(true);
    expect(await inFlight).toMatchObject({ decision: 'allow', source: 'local' });
    expect(await recorded(tenant)).toEqual(['slow']);
  });

  it('throws instead of answering when close() gave up on it, so nothing answered goes unrecorded', async () => {
    const tenant = await tenantWithPolicies();
    const { client, open, state } = slowPolicyClient(tenant, true, { closeTimeoutMs: 200 });
    expect((await client.validate('pay', { amount: 1 })).source).toBe('local');
    const inFlight = client.validate('slow', { amount: 2 }).catch((e: unknown) => e);
    const err = await client.close().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FlushError);
    expect((err as FlushError).pending).toHaveLength(1);
    const postsAtClose = state.posts;
    open();
    const r = await inFlight;
    expect(r).toBeInstanceOf(SvcError);
    expect((r as Error).message).toMatch(/closed while the call to "slow" was being decided/);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(state.posts).toBe(postsAtClose);
  });

  it('throws instead of answering after a close() that succeeded without it', async () => {
    const tenant = await tenantWithPolicies();
    const { client, open } = slowPolicyClient(tenant, false, { closeTimeoutMs: 200 });
    const inFlight = client.validate('slow', { amount: 2 }).catch((e: unknown) => e);
    // Nothing was answered locally: close() has nothing to hand back once it stops waiting.
    await client.close();
    open();
    expect(await inFlight).toBeInstanceOf(SvcError);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(await recorded(tenant)).toEqual([]);
  });
});
