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

describe('counts', () => {
  it('refuses a log.maxBuffered or maxCachedPolicies that is no count, as log.batchSize', () => {
    const base = { apiKey: 'svc_x', baseUrl: t.url, live: false };
    for (const [name, bad] of [
      ['log.maxBuffered', { log: { maxBuffered: 1.5 } }],
      ['log.maxBuffered', { log: { maxBuffered: 0.5 } }],
      ['log.maxBuffered', { log: { maxBuffered: -1 } }],
      ['log.maxBuffered', { log: { maxBuffered: Number.NEGATIVE_INFINITY } }],
      ['log.maxBuffered', { log: { maxBuffered: '100' } }],
      ['maxCachedPolicies', { maxCachedPolicies: 2.5 }],
      ['maxCachedPolicies', { maxCachedPolicies: '10' }],
    ] as const) {
      expect(() => createClient({ ...base, ...(bad as object) }), JSON.stringify(bad)).toThrow(
        new RegExp(`^${name} must be a whole number of at least 0, or Infinity, not `),
      );
    }
    for (const ok of [0, 1, 100_000, Number.POSITIVE_INFINITY, undefined, null]) {
      clients.push(
        createClient({ ...base, maxCachedPolicies: ok as number, log: { maxBuffered: ok as number } }),
      );
    }
  });
});

describe('booleans, callbacks and the key', () => {
  const base = { apiKey: 'svc_x', baseUrl: 'http://127.0.0.1:9', live: false };

  it('refuses a localValidation, live or log.snapshot that is not a boolean, such as the string false', () => {
    for (const name of ['localValidation', 'live', 'log.snapshot'] as const) {
      for (const bad of ['false', 'true', '', 0, 1, {}, []]) {
        const opts = name === 'log.snapshot' ? { log: { snapshot: bad } } : { [name]: bad };
        expect(() => createClient({ ...base, ...(opts as object) }), `${name} ${String(bad)}`).toThrow(
          new RegExp(`^${name} must be true or false, not `),
        );
      }
      for (const ok of [true, false, undefined, null]) {
        const opts = name === 'log.snapshot' ? { log: { snapshot: ok } } : { [name]: ok };
        clients.push(createClient({ ...base, ...(opts as object) }));
      }
    }
    // The error shows a string as one: 'false' is not false.
    expect(() => createClient({ ...base, live: 'false' as unknown as boolean })).toThrow(
      'live must be true or false, not "false"',
    );
  });

  it('refuses an onError, onStreamChange or fetch that is not a function', async () => {
    for (const name of ['onError', 'onStreamChange', 'fetch'] as const) {
      for (const bad of ['fetch', 1, true, {}]) {
        expect(() => createClient({ ...base, [name]: bad }), `${name} ${String(bad)}`).toThrow(
          new RegExp(`^${name} must be a function, not `),
        );
      }
      clients.push(createClient({ ...base, [name]: null }));
    }
    // A fetch that is no function used to fail every request as the service being unreachable:
    // onUnavailable 'allow' then allowed every call unchecked.
    expect(() =>
      createClient({ ...base, onUnavailable: 'allow', fetch: {} as unknown as typeof fetch }),
    ).toThrow(/^fetch must be a function/);
  });

  it('refuses an apiKey fetch could not send (the failure would read as an outage), without showing it', () => {
    for (const bad of ['svc_secret\nX-Other: 1', 'svc_secret\u0000', 'svc_secret\u0100', 'svc_\rsecret']) {
      const make = () => createClient({ ...base, apiKey: bad, onUnavailable: 'allow' });
      expect(make, JSON.stringify(bad)).toThrow(/^apiKey must be a value an HTTP header can carry/);
      expect(make, JSON.stringify(bad)).not.toThrow(/secret/);
    }
    for (const bad of [123, {}, true]) {
      expect(() => createClient({ ...base, apiKey: bad as unknown as string }), String(bad)).toThrow(
        /^apiKey must be a string, not a value of type /,
      );
    }
    // Spaces and a line break around it (a key read from a file) are dropped by fetch, as before.
    clients.push(createClient({ ...base, apiKey: ' svc_x\n' }), createClient({ ...base, apiKey: 'svc_é' }));
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

  it('refuses a log.whenFull other than server, wait or throw', () => {
    const base = { apiKey: 'svc_x', baseUrl: t.url, live: false };
    for (const bad of ['Server', 'block', '', 0, true]) {
      expect(() => createClient({ ...base, log: { whenFull: bad as 'server' } }), String(bad)).toThrow(
        /^log\.whenFull must be server, wait or throw, not /,
      );
    }
  });
});
