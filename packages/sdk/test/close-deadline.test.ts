import { createClient } from '@svc/sdk';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../server/test/fixture.js';
import { keyHeader } from '../../server/test/helpers.js';
import { createTenant, putPolicy } from './live.js';

const t = useTestApp({}, { listen: true });

describe('close() at its deadline', () => {
  it('resolves when the request under way at the deadline records what was left', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 100 }],
    });
    // The log's request is answered after close()'s deadline, and records the decision.
    const slowLog: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (init?.method === 'POST' && String(input).endsWith('/v1/decisions')) {
        await new Promise((r) => setTimeout(r, 300));
      }
      return res;
    };
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      closeTimeoutMs: 100,
      fetch: slowLog,
    });
    expect((await client.validate('pay', { amount: 5 })).source).toBe('local');
    await client.close();
    const res = await t.inject({ method: 'GET', url: '/v1/decisions', headers: keyHeader(tenant.apiKey) });
    expect(res.json().data).toHaveLength(1);
  });
});
