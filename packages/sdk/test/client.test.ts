import {
  ApiError,
  ApprovalDeniedError,
  ApprovalTimeoutError,
  type Client,
  type ClientOptions,
  createClient,
  DeniedError,
  FlushError,
  ServiceUnavailableError,
} from '@svc/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveApproval, setTier } from '../../server/test/approvals.js';
import { useTestApp } from '../../server/test/fixture.js';
import { asUser, type Tenant } from '../../server/test/helpers.js';
import { connectedClient, createTenant, putPolicy } from './live.js';

const clients: Client[] = [];
const t = useTestApp({}, { listen: true });
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
});

const PAY = {
  mode: 'deterministic',
  constraints: [
    { argumentName: 'amount', maximum: 100 },
    { argumentName: 'amount', maximum: 50, action: 'require_approval' },
  ],
};

async function tenantWithPolicy(tier = 'free'): Promise<Tenant> {
  const tenant = await createTenant(t);
  if (tier !== 'free') await setTier(t, tenant, tier);
  await putPolicy(t, tenant, 'pay', PAY);
  return tenant;
}

async function track(client: Promise<Client> | Client): Promise<Client> {
  const c = await client;
  clients.push(c);
  return c;
}

async function decisionsOf(tenant: Tenant) {
  const all: { toolName: string; decision: string; context: Record<string, unknown>; arguments: unknown }[] =
    [];
  for (let offset = 0; ; offset += 100) {
    const page = await t.inject({
      method: 'GET',
      url: `/v1/decisions?limit=100&offset=${offset}`,
      headers: asUser(tenant),
    });
    all.push(...page.json().data);
    if (!page.json().pagination.hasMore) return all;
  }
}

describe('wrap against a live server', () => {
  it('runs the function on allow and throws DeniedError with the failed constraints on deny', async () => {
    const tenant = await tenantWithPolicy();
    const client = await track(connectedClient(t.url, tenant));
    const calls: number[] = [];
    const pay = client.wrap('pay', async (args: { amount: number }) => {
      calls.push(args.amount);
      return `paid ${args.amount}`;
    });
    await expect(pay({ amount: 20 })).resolves.toBe('paid 20');
    const denied = await pay({ amount: 500 }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(DeniedError);
    expect(denied).toMatchObject({
      toolName: 'pay',
      failedConstraints: [
        { parameter: 'amount', constraint_type: 'range', expected: { maximum: 100 } },
        { parameter: 'amount', constraint_type: 'range', expected: { maximum: 50 } },
      ],
    });
    expect(calls).toEqual([20]);
    // Both decisions were taken locally.
    expect((await client.validate('pay', { amount: 20 })).source).toBe('local');
  });

  it('waits for a person on require_approval, then runs the call once it is approved', async () => {
    const tenant = await tenantWithPolicy('team');
    const client = await track(connectedClient(t.url, tenant));
    let ran = 0;
    const pay = client.wrap(
      'pay',
      async (args: { amount: number }) => {
        ran++;
        return args.amount;
      },
      { approval: { pollIntervalMs: 50, timeoutMs: 10_000 } },
    );
    const pending = pay({ amount: 75 });
    let approvalId: string | undefined;
    for (let i = 0; i < 100 && !approvalId; i++) {
      await new Promise((r) => setTimeout(r, 20));
      const list = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(tenant) });
      approvalId = list.json().data[0]?.id;
    }
    expect(approvalId).toBeDefined();
    expect(ran).toBe(0);
    expect((await resolveApproval(t, tenant, approvalId!, 'approve')).statusCode).toBe(200);
    await expect(pending).resolves.toBe(75);
    expect(ran).toBe(1);
    const approval = await t.inject({
      method: 'GET',
      url: `/v1/approvals/${approvalId}`,
      headers: asUser(tenant),
    });
    expect(approval.json().status).toBe('approved');
  });

  it('throws ApprovalDeniedError when the person denies, ApprovalTimeoutError when nobody answers', async () => {
    const tenant = await tenantWithPolicy('team');
    const client = await track(connectedClient(t.url, tenant));
    const first = await client.validate('pay', { amount: 60 });
    expect(first).toMatchObject({ decision: 'require_approval', source: 'server' });
    const waiting = client.waitForApproval(first.approvalId!, { pollIntervalMs: 5000, timeoutMs: 20_000 });
    await resolveApproval(t, tenant, first.approvalId!, 'deny', 'bob');
    // The approval.resolved event wakes the wait long before the 5 s poll would.
    const started = Date.now();
    await expect(waiting).rejects.toBeInstanceOf(ApprovalDeniedError);
    expect(Date.now() - started).toBeLessThan(2000);

    const second = await client.validate('pay', { amount: 61 });
    await expect(
      client.waitForApproval(second.approvalId!, { pollIntervalMs: 20, timeoutMs: 100 }),
    ).rejects.toBeInstanceOf(ApprovalTimeoutError);
  });
});

describe('live policy updates', () => {
  it('a policy update changes the next local decision of a connected client within a second', async () => {
    const tenant = await tenantWithPolicy();
    const client = await track(connectedClient(t.url, tenant));
    expect(await client.validate('pay', { amount: 30 })).toMatchObject({
      decision: 'allow',
      source: 'local',
    });
    const changed = Date.now();
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 10 }],
    });
    let result = await client.validate('pay', { amount: 30 });
    while (result.decision === 'allow' && Date.now() - changed < 5000) {
      await new Promise((r) => setTimeout(r, 10));
      result = await client.validate('pay', { amount: 30 });
    }
    expect(Date.now() - changed).toBeLessThan(1000);
    expect(result).toMatchObject({ decision: 'deny', source: 'local' });
    // Deactivation reaches it the same way.
    await t.inject({ method: 'POST', url: '/v1/policies/pay/deactivate', headers: asUser(tenant) });
    for (let i = 0; i < 100 && result.decision === 'deny'; i++) {
      await new Promise((r) => setTimeout(r, 10));
      result = await client.validate('pay', { amount: 30 });
    }
    expect(result).toEqual({
      decision: 'allow',
      reason: 'Policy for tool "pay" is inactive; allowed without checks',
      failedConstraints: [],
      source: 'local',
    });
  });

  it('without the stream a cached policy is used no longer than maxStalenessMs', async () => {
    const tenant = await tenantWithPolicy();
    const client = await track(
      createClient({ apiKey: tenant.apiKey, baseUrl: t.url, live: false, maxStalenessMs: 300 }),
    );
    expect((await client.validate('pay', { amount: 30 })).decision).toBe('allow');
    const fetched = Date.now();
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 10 }],
    });
    const stale = await client.validate('pay', { amount: 30 });
    // Within the bound the cached copy may answer; past it, never.
    if (Date.now() - fetched < 300) expect(stale.decision).toBe('allow');
    await new Promise((r) => setTimeout(r, 350));
    expect(await client.validate('pay', { amount: 30 })).toMatchObject({ decision: 'deny', source: 'local' });
  });

  it('sends the calls of a tool named "." or ".." to the server, whose path they cannot be in', async () => {
    // No policy can be written for such a name; its calls are still decided and recorded.
    const tenant = await createTenant(t);
    const client = await track(createClient({ apiKey: tenant.apiKey, baseUrl: t.url, live: false }));
    for (const name of ['.', '..']) {
      expect(await client.validate(name, { amount: 1000 })).toMatchObject({
        decision: 'allow',
        reason: `No policy for tool "${name}"; allowed without checks`,
        source: 'server',
      });
    }
  });

  it('sends calls that need the server (session limits) to the server', async () => {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'search', { mode: 'deterministic', sessionConstraints: { maxCalls: 1 } });
    const client = await track(connectedClient(t.url, tenant));
    const ctx = { session_id: 's-1' };
    expect(await client.validate('search', {}, ctx)).toMatchObject({ decision: 'allow', source: 'server' });
    expect(await client.validate('search', {}, ctx)).toMatchObject({
      decision: 'deny',
      source: 'server',
      failedConstraints: [{ constraint_type: 'max_calls' }],
    });
  });
});

describe('decision log', () => {
  it('close() leaves every local decision in GET /v1/decisions', async () => {
    const tenant = await tenantWithPolicy();
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      log: { batchSize: 64, flushIntervalMs: 5000 },
    });
    const results = [];
    for (let i = 0; i < 300; i++) {
      results.push(await client.validate('pay', { amount: i % 2 === 0 ? 10 : 1000, i }, { agent_id: 'a1' }));
    }
    expect(results.every((r) => r.source === 'local')).toBe(true);
    await client.close();
    const logged = await decisionsOf(tenant);
    expect(logged).toHaveLength(300);
    expect(logged.every((d) => d.context.source === 'client' && d.context.agent_id === 'a1')).toBe(true);
    expect(logged.filter((d) => d.decision === 'deny')).toHaveLength(150);
    const seen = new Set(logged.map((d) => (d.arguments as { i: number }).i));
    expect(seen.size).toBe(300);
  });

  it('retries a refused batch after the Retry-After the server sent', async () => {
    const tenant = await tenantWithPolicy();
    const posts: number[] = [];
    // A 429 in the service's own envelope for the first log request; every other request is real.
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      fetch: async (input, init) => {
        if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
          posts.push(Date.now());
          if (posts.length === 1) {
            return new Response(
              JSON.stringify({ error: { code: 'rate_limit_exceeded', message: 'slow down' } }),
              {
                status: 429,
                headers: { 'retry-after': '1', 'content-type': 'application/json' },
              },
            );
          }
        }
        return fetch(input, init);
      },
    });
    await client.validate('pay', { amount: 1 });
    await client.flush();
    expect(posts).toHaveLength(2);
    expect(posts[1]! - posts[0]!).toBeGreaterThanOrEqual(950);
    await client.close();
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });
});

describe('when the service cannot be reached', () => {
  const nowhere = 'http://127.0.0.1:9';
  const opts = {
    apiKey: 'svc_x',
    baseUrl: nowhere,
    live: false,
    maxRetries: 0,
    closeTimeoutMs: 100,
  } as const;

  it('denies by default (fail closed), and close() hands back the decisions it could not log', async () => {
    const client = createClient(opts);
    const r = await client.validate('pay', { amount: 1 });
    expect(r).toMatchObject({ decision: 'deny', source: 'local' });
    expect(r.reason).toMatch(/fail closed/);
    await expect(
      client.wrap('pay', async (_args: { amount: number }) => 'ran')({ amount: 1 }),
    ).rejects.toBeInstanceOf(DeniedError);
    const closing = await client.close().catch((e: unknown) => e);
    expect(closing).toBeInstanceOf(FlushError);
    expect((closing as FlushError).pending).toHaveLength(2);
  });

  it('never takes an answer that is not the API’s for a decision: a proxy page or {} fails closed', async () => {
    const answers: [number, string][] = [
      [200, '<html>gateway</html>'],
      [200, '{}'],
      [200, '{"decision":"ALLOW"}'],
      [404, '<html>not here</html>'],
    ];
    for (const [status, body] of answers) {
      // Every request of this client (policy fetch, validate) gets the same foreign answer.
      const client = createClient({
        ...opts,
        fetch: async () => new Response(body, { status, headers: { 'content-type': 'text/html' } }),
      });
      // A deny (the service counts as unreachable) or an error: never an allow, and wrap never runs.
      const r = await client.validate('pay', { amount: 1000 }).catch((e: unknown) => e);
      if (r instanceof Error) expect(r, `${status} ${body}`).toBeInstanceOf(ApiError);
      else
        expect(r, `${status} ${body}`).toMatchObject({
          decision: 'deny',
          reason: expect.stringMatching(/fail closed/),
        });
      let ran = false;
      await client
        .wrap('pay', async (_args: { amount: number }) => {
          ran = true;
        })({ amount: 1 })
        .catch(() => {});
      expect(ran, `${status} ${body}`).toBe(false);
      await client.close().catch(() => {});
    }
  });

  it('throws ServiceUnavailableError with onUnavailable: throw, allows only with onUnavailable: allow', async () => {
    const throwing = createClient({ ...opts, onUnavailable: 'throw' });
    await expect(throwing.validate('pay', {})).rejects.toBeInstanceOf(ServiceUnavailableError);
    await throwing.close();
    const open = createClient({ ...opts, onUnavailable: 'allow' });
    expect(await open.validate('pay', {})).toMatchObject({ decision: 'allow', source: 'local' });
    await open.close().catch(() => {});
  });
});

describe('an outage while a fresh policy is cached', () => {
  /** A client whose requests, but for policy reads, fail as a network does while `down.on`. */
  function outageClient(tenant: Tenant, options: Partial<ClientOptions> = {}) {
    const down = { on: false };
    const errors: Error[] = [];
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      maxRetries: 0,
      onError: (e) => errors.push(e),
      ...options,
      fetch: async (input, init) => {
        if (down.on && !String(input).includes('/v1/policies/')) throw new TypeError('fetch failed');
        return fetch(input, init);
      },
    });
    clients.push(client);
    return { client, down, errors };
  }

  const OVER_100 = 'amount: must be at most 100 (got 500); amount: must be at most 50 (got 500)';

  it('keeps the policy’s deny for a call presenting an approval, and denies what needs one, whatever onUnavailable says', async () => {
    for (const onUnavailable of ['allow', 'deny', 'throw'] as const) {
      const tenant = await tenantWithPolicy('team');
      const { client, down, errors } = outageClient(tenant, { onUnavailable });
      expect(await client.validate('pay', { amount: 1 })).toMatchObject({
        decision: 'allow',
        source: 'local',
      });
      down.on = true;
      // The service would deny it too: a hard deny is not lifted by an approval.
      expect(await client.validate('pay', { amount: 500 }, { approval_id: 'a1' }), onUnavailable).toEqual({
        decision: 'deny',
        reason: OVER_100,
        failedConstraints: [
          expect.objectContaining({ parameter: 'amount', expected: { maximum: 100 } }),
          expect.objectContaining({ parameter: 'amount', expected: { maximum: 50 } }),
        ],
        source: 'local',
      });
      // An approval can be neither requested nor checked: denied, never onUnavailable's allow.
      for (const context of [undefined, { approval_id: 'a1' }]) {
        const r = await client.validate('pay', { amount: 70 }, context);
        expect(r, onUnavailable).toMatchObject({
          decision: 'deny',
          source: 'local',
          reason: expect.stringMatching(/unreachable.*approval.*denied.*must be at most 50 \(got 70\)/),
          failedConstraints: [expect.objectContaining({ parameter: 'amount', expected: { maximum: 50 } })],
        });
        expect(r.reason).not.toMatch(/no fresh policy/);
      }
      let ran = false;
      const pay = client.wrap('pay', async (_args: { amount: number }) => {
        ran = true;
      });
      await expect(pay({ amount: 70 })).rejects.toBeInstanceOf(DeniedError);
      expect(ran).toBe(false);
      expect(errors.length).toBeGreaterThan(0);
      expect(errors.every((e) => e instanceof ServiceUnavailableError)).toBe(true);
      // Answered, so recorded once the service is back.
      down.on = false;
      await client.close();
      const logged = await decisionsOf(tenant);
      expect(logged.filter((d) => d.decision === 'deny')).toHaveLength(4);
      const presented = logged.find((d) => (d.arguments as { amount: number }).amount === 500)!;
      expect(presented).toMatchObject({ decision: 'deny', context: { approval_id: 'a1', source: 'client' } });
    }
  });

  it('answers the local decision while the log is full (whenFull: server), kept beyond the bound', async () => {
    for (const onUnavailable of ['allow', 'deny'] as const) {
      const tenant = await tenantWithPolicy();
      const { client, down } = outageClient(tenant, { onUnavailable, log: { maxBuffered: 2 } });
      await client.validate('pay', { amount: 1 });
      await client.flush();
      down.on = true;
      await client.validate('pay', { amount: 2 });
      await client.validate('pay', { amount: 3 });
      // The log is full and the service unreachable: the fresh policy decides, not onUnavailable.
      expect(await client.validate('pay', { amount: 500 }), onUnavailable).toMatchObject({
        decision: 'deny',
        reason: OVER_100,
        source: 'local',
      });
      expect(await client.validate('pay', { amount: 5 }), onUnavailable).toEqual({
        decision: 'allow',
        reason: 'Allowed: every constraint is satisfied',
        failedConstraints: [],
        source: 'local',
      });
      down.on = false;
      await client.close();
      const logged = await decisionsOf(tenant);
      expect(logged.map((d) => [(d.arguments as { amount: number }).amount, d.decision]).sort()).toEqual([
        [1, 'allow'],
        [2, 'allow'],
        [3, 'allow'],
        [5, 'allow'],
        [500, 'deny'],
      ]);
    }
  });
});

describe('a fetch given in the options', () => {
  it('is called as a plain function, as a browser’s window.fetch must be', async () => {
    const tenant = await tenantWithPolicy();
    // Browsers throw "Illegal invocation" when window.fetch is called as a method of another object.
    function windowFetch(this: unknown, input: Parameters<typeof fetch>[0], init?: RequestInit) {
      if (this !== undefined && this !== globalThis) throw new TypeError('Illegal invocation');
      return fetch(input, init);
    }
    const errors: Error[] = [];
    let settle!: (connected: boolean) => void;
    const stream = new Promise<boolean>((resolve) => {
      settle = resolve;
    });
    const client = await track(
      createClient({
        apiKey: tenant.apiKey,
        baseUrl: t.url,
        fetch: windowFetch,
        onStreamChange: (up) => up && settle(true),
        onError: (e) => {
          errors.push(e);
          settle(false);
        },
      }),
    );
    // The event stream, a policy read, a validation and the decision log all use it.
    expect(await stream).toBe(true);
    expect(await client.validate('pay', { amount: 1 })).toMatchObject({ decision: 'allow', source: 'local' });
    expect(await client.validate('pay', { amount: 70 })).toMatchObject({ source: 'server' });
    await client.flush();
    expect(errors).toEqual([]);
    expect(await decisionsOf(tenant)).toHaveLength(2);
  });
});
