import { type Client, createClient, SvcError } from '@svc/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { useTestApp } from '../../server/test/fixture.js';
import { keyHeader, type Tenant } from '../../server/test/helpers.js';
import { createTenant, putPolicy } from './live.js';

const clients: Client[] = [];
const t = useTestApp({}, { listen: true });
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
});

async function payTenant(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', {
    mode: 'deterministic',
    constraints: [{ argumentName: 'amount', maximum: 100 }],
  });
  return tenant;
}

async function decisionsOf(tenant: Tenant): Promise<unknown[]> {
  const res = await t.inject({ method: 'GET', url: '/v1/decisions', headers: keyHeader(tenant.apiKey) });
  return res.json().data;
}

describe('timing options', () => {
  it('asks the service with a request timeout of Infinity (no timeout), rather than failing every request', async () => {
    const tenant = await payTenant();
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      requestTimeoutMs: Number.POSITIVE_INFINITY,
      onUnavailable: 'allow',
    });
    clients.push(client);
    // The policy denies it: a client that never reached the service would allow it (fail open).
    const r = await client.validate('pay', { amount: 1000 });
    expect(r.decision).toBe('deny');
    expect(r.reason).toMatch(/amount/);
    await client.close();
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });

  it('refuses a request timeout or a retry count that would never let a request reach the service', () => {
    const base = { apiKey: 'svc_x', baseUrl: t.url, live: false };
    for (const bad of [
      { requestTimeoutMs: Number.NaN },
      { requestTimeoutMs: 0 },
      { requestTimeoutMs: -1 },
      { requestTimeoutMs: '10000' },
      { maxRetries: Number.NaN },
      { maxRetries: -1 },
      { maxRetries: '2' },
      { maxRetries: Number.POSITIVE_INFINITY },
      { maxRetries: 1.5 },
      { closeTimeoutMs: Number.NaN },
      { closeTimeoutMs: -1 },
      { streamIdleMs: Number.NaN },
      // NaN here would spin the policy cache's eviction, or the decision log's flush, for ever; a
      // NaN poll interval or timeout would poll the service without pause or end.
      { maxCachedPolicies: Number.NaN },
      { maxCachedPolicies: -1 },
      { log: { batchSize: Number.NaN } },
      // A count of decisions per request: 1.5 would send batches of 2.
      { log: { batchSize: 1.5 } },
      { log: { batchSize: Number.POSITIVE_INFINITY } },
      { log: { maxBuffered: Number.NaN } },
      { log: { flushIntervalMs: Number.NaN } },
      { approvals: { pollIntervalMs: Number.NaN } },
      { approvals: { pollIntervalMs: -1 } },
      { approvals: { timeoutMs: Number.NaN } },
      { maxStalenessMs: Number.NaN },
      { maxRetryDelayMs: Number.NaN },
    ]) {
      expect(() => createClient({ ...base, ...(bad as object) }), JSON.stringify(bad)).toThrow(SvcError);
    }
    // Unset (undefined or null) is the default, as for every option.
    expect(() =>
      createClient({ ...base, requestTimeoutMs: undefined, maxRetries: null as unknown as number }),
    ).not.toThrow();
  });

  it('refuses a NaN poll interval or timeout of one approval wait, before asking the service', async () => {
    let requests = 0;
    const client = createClient({
      apiKey: 'svc_x',
      baseUrl: t.url,
      live: false,
      fetch: (input, init) => {
        requests++;
        return fetch(input, init);
      },
    });
    clients.push(client);
    const id = '00000000-0000-7000-8000-000000000000';
    for (const bad of [{ pollIntervalMs: Number.NaN }, { timeoutMs: Number.NaN }, { pollIntervalMs: -1 }]) {
      await expect(client.waitForApproval(id, bad), JSON.stringify(bad)).rejects.toThrow(
        /^(pollIntervalMs|timeoutMs) must be/,
      );
    }
    expect(requests).toBe(0);
    // What used to work still does: 0 and Infinity where they mean something.
    expect(() =>
      createClient({
        apiKey: 'svc_x',
        baseUrl: t.url,
        live: false,
        maxCachedPolicies: 0,
        log: {
          batchSize: 0,
          maxBuffered: Number.POSITIVE_INFINITY,
          flushIntervalMs: Number.POSITIVE_INFINITY,
        },
        approvals: { pollIntervalMs: Number.POSITIVE_INFINITY, timeoutMs: Number.POSITIVE_INFINITY },
      }),
    ).not.toThrow();
  });

  it('waits as long as it takes with a close timeout of Infinity', async () => {
    const tenant = await payTenant();
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      closeTimeoutMs: Number.POSITIVE_INFINITY,
    });
    expect((await client.validate('pay', { amount: 5 })).source).toBe('local');
    await client.close();
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });

  it('keeps no timer spinning with a stream idle time of Infinity (never idle)', async () => {
    const tenant = await payTenant();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const client = createClient({
        apiKey: tenant.apiKey,
        baseUrl: t.url,
        streamIdleMs: Number.POSITIVE_INFINITY,
      });
      clients.push(client);
      await client.validate('pay', { amount: 5 });
      await new Promise((r) => setTimeout(r, 100));
      await client.close();
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => w === 'TimeoutOverflowWarning')).toEqual([]);
  });
});

describe('choices', () => {
  it('refuses an onUnavailable other than deny, allow or throw, which would silently deny', () => {
    const base = { apiKey: 'svc_x', baseUrl: t.url, live: false };
    for (const bad of ['ALLOW', 'alow', 'thorw', 'Deny', '', 0, true, {}]) {
      expect(() => createClient({ ...base, onUnavailable: bad as 'deny' }), String(bad)).toThrow(SvcError);
      expect(() => createClient({ ...base, onUnavailable: bad as 'deny' }), String(bad)).toThrow(
        /^onUnavailable must be deny, allow or throw, not /,
      );
    }
    for (const ok of ['deny', 'allow', 'throw', undefined, null] as const) {
      clients.push(createClient({ ...base, onUnavailable: ok as 'deny' }));
    }
  });
});
