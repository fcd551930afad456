import {
  ApiError,
  type Client,
  type ClientOptions,
  createClient,
  DeniedError,
  FlushError,
  LogFullError,
  LogRejectedError,
  SvcError,
} from '@svc/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asUser, type Tenant, type TestApp } from '../../server/test/helpers.js';
import { waitFor } from '../../server/test/streams.js';
import { createTenant, putPolicy, startServer } from './live.js';

let t: TestApp;
let baseUrl: string;
beforeAll(async () => {
  ({ t, baseUrl } = await startServer());
});
afterAll(async () => t.close());

const PAY = { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] };

async function tenantWithPolicy(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', PAY);
  return tenant;
}

interface Logged {
  toolName: string;
  decision: string;
  reason: string;
  context: Record<string, unknown>;
  arguments: Record<string, unknown>;
}

async function decisionsOf(tenant: Tenant): Promise<Logged[]> {
  const page = await t.inject({ method: 'GET', url: '/v1/decisions?limit=100', headers: asUser(tenant) });
  return page.json().data;
}

/**
 * A client whose log requests are held until release(): `posted` resolves when the first one
 * arrives, so a test knows the buffer is in flight without waiting for time to pass.
 */
function heldClient(tenant: Tenant, options: Partial<ClientOptions>) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  let posted!: () => void;
  const firstPost = new Promise<void>((resolve) => {
    posted = resolve;
  });
  const client = createClient({
    apiKey: tenant.apiKey,
    baseUrl,
    live: false,
    ...options,
    fetch: async (input, init) => {
      if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
        posted();
        await gate;
      }
      return fetch(input, init);
    },
  });
  return { client, release, firstPost };
}

describe('a full decision log (log.maxBuffered)', () => {
  it('sends calls to the service while full (whenFull: server), and loses none', async () => {
    const tenant = await tenantWithPolicy();
    const { client, release, firstPost } = heldClient(tenant, { log: { batchSize: 2, maxBuffered: 3 } });
    const local = [];
    for (let i = 0; i < 3; i++) local.push(await client.validate('pay', { amount: i }));
    expect(local.map((r) => r.source)).toEqual(['local', 'local', 'local']);
    await firstPost;
    // Three decisions wait: the next calls are decided (and recorded) by the service.
    const full = await client.validate('pay', { amount: 3 });
    expect(full).toMatchObject({ decision: 'allow', source: 'server' });
    expect(full.decisionId).toEqual(expect.any(String));
    const denied = await client.validate('pay', { amount: 500 });
    expect(denied).toMatchObject({ decision: 'deny', source: 'server' });
    release();
    await client.close();
    const logged = await decisionsOf(tenant);
    expect(logged.map((d) => d.arguments.amount).sort((a, b) => Number(a) - Number(b))).toEqual([
      0, 1, 2, 3, 500,
    ]);
    expect(logged.filter((d) => d.context.source === 'client')).toHaveLength(3);
  });

  it('waits for room (whenFull: wait), then decides locally', async () => {
    const tenant = await tenantWithPolicy();
    const { client, release, firstPost } = heldClient(tenant, {
      log: { batchSize: 2, maxBuffered: 2, whenFull: 'wait' },
    });
    await client.validate('pay', { amount: 1 });
    await client.validate('pay', { amount: 2 });
    await firstPost;
    let settled = false;
    const third = client.validate('pay', { amount: 3 }).finally(() => {
      settled = true;
    });
    // Room appears only once the held request is answered.
    await Promise.resolve();
    expect(settled).toBe(false);
    release();
    expect(await third).toMatchObject({ decision: 'allow', source: 'local' });
    await client.close();
    expect(await decisionsOf(tenant)).toHaveLength(3);
  });

  it('throws LogFullError while full (whenFull: throw): the wrapped tool does not run', async () => {
    const tenant = await tenantWithPolicy();
    const { client, release, firstPost } = heldClient(tenant, {
      log: { batchSize: 1, maxBuffered: 1, whenFull: 'throw' },
    });
    await client.validate('pay', { amount: 1 });
    await firstPost;
    await expect(client.validate('pay', { amount: 2 })).rejects.toBeInstanceOf(LogFullError);
    let ran = false;
    const pay = client.wrap('pay', async (_a: { amount: number }) => {
      ran = true;
    });
    await expect(pay({ amount: 3 })).rejects.toBeInstanceOf(LogFullError);
    expect(ran).toBe(false);
    release();
    await client.close();
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });

  it('refuses an unknown whenFull', () => {
    expect(() =>
      createClient({
        apiKey: 'svc_x',
        baseUrl,
        live: false,
        log: { whenFull: 'drop' as 'throw' },
      }),
    ).toThrow(SvcError);
  });
});

describe('what the log records', () => {
  const client = (tenant: Tenant, options: Partial<ClientOptions> = {}): Client =>
    createClient({ apiKey: tenant.apiKey, baseUrl, live: false, ...options });

  it('a local denial is recorded with the reason the caller got', async () => {
    const tenant = await tenantWithPolicy();
    const c = client(tenant);
    const r = await c.validate('pay', { amount: 1000 }, { agent_id: 'a1' });
    expect(r).toMatchObject({ decision: 'deny', source: 'local' });
    await expect(c.enforce('pay', { amount: 2000 })).rejects.toBeInstanceOf(DeniedError);
    await c.close();
    const logged = await decisionsOf(tenant);
    const first = logged.find((d) => d.arguments.amount === 1000)!;
    expect(first).toMatchObject({ decision: 'deny', reason: r.reason });
    expect(first.context).toMatchObject({ agent_id: 'a1', source: 'client' });
    expect(logged.find((d) => d.arguments.amount === 2000)!.reason).toMatch(/amount/);
  });

  it('records the arguments as they were at the call, or as they are when sent with snapshot: false', async () => {
    const tenant = await tenantWithPolicy();
    const snap = client(tenant);
    const kept = { amount: 6, note: 'before' };
    await snap.validate('pay', kept, { step: 1 });
    kept.note = 'after';
    await snap.close();
    expect((await decisionsOf(tenant))[0]).toMatchObject({
      arguments: { amount: 6, note: 'before' },
      context: { step: 1 },
    });

    const other = await tenantWithPolicy();
    const lazy = client(other, { log: { snapshot: false } });
    const args = { amount: 5, note: 'before' };
    await lazy.validate('pay', args);
    args.note = 'after';
    await lazy.close();
    expect((await decisionsOf(other))[0]!.arguments).toEqual({ amount: 5, note: 'after' });
  });

  it('keeps flat and nested arguments as they were, and a denial the reason of the arguments at the call', async () => {
    const tenant = await tenantWithPolicy();
    const c = client(tenant);
    const denied: Record<string, unknown> = { amount: 500, note: 'big' };
    expect(await c.validate('pay', denied)).toMatchObject({ decision: 'deny', source: 'local' });
    denied.amount = 5;
    delete denied.note;
    const nested = { amount: 7, meta: { k: 'before' } };
    await c.validate('pay', nested, { session: { step: 1 } });
    nested.meta.k = 'after';
    await c.validate('pay', { amount: 8, skipped: undefined, when: null });
    await c.validate('pay', { amount: 9, at: new Date(0) });
    await c.close();
    const byAmount = new Map((await decisionsOf(tenant)).map((d) => [d.arguments.amount, d]));
    expect(byAmount.get(500)).toMatchObject({ decision: 'deny', arguments: { amount: 500, note: 'big' } });
    expect(byAmount.get(500)!.reason).toMatch(/amount/);
    expect(byAmount.get(7)).toMatchObject({
      arguments: { meta: { k: 'before' } },
      context: { session: { step: 1 } },
    });
    expect(byAmount.get(8)!.arguments).toEqual({ amount: 8, when: null });
    expect(byAmount.get(9)!.arguments).toEqual({ amount: 9, at: '1970-01-01T00:00:00.000Z' });
  });

  it('records neither a call whose arguments throw while copied nor what Object.prototype gained', async () => {
    const tenant = await tenantWithPolicy();
    const c = client(tenant);
    const throwing = {
      amount: 1,
      get note(): string {
        throw new Error('no note');
      },
    };
    await expect(c.validate('pay', throwing)).rejects.toThrow('no note');
    const proto = Object.prototype as Record<string, unknown>;
    Object.defineProperty(proto, 'polluted', { value: 'x', enumerable: true, configurable: true });
    try {
      await c.validate('pay', { amount: 2, note: 'kept' });
    } finally {
      delete proto.polluted;
    }
    await c.close();
    expect((await decisionsOf(tenant)).map((d) => d.arguments)).toEqual([{ amount: 2, note: 'kept' }]);
  });

  it('records thousands of local decisions across several chunks and batches, each once', async () => {
    const tenant = await tenantWithPolicy();
    const c = client(tenant, { log: { flushIntervalMs: 60_000 } });
    for (let i = 0; i < 2600; i++) await c.validate('pay', { amount: i % 200, i });
    await c.close();
    const seen = new Set<number>();
    for (let offset = 0; ; offset += 100) {
      const page = (
        await t.inject({
          method: 'GET',
          url: `/v1/decisions?limit=100&offset=${offset}`,
          headers: asUser(tenant),
        })
      ).json();
      for (const d of page.data as Logged[]) seen.add(d.arguments.i as number);
      if (!page.pagination.hasMore) break;
    }
    expect(seen.size).toBe(2600);
  });

  it('refuses at the call arguments that cannot be written as JSON, so no answered decision goes unlogged', async () => {
    const tenant = await tenantWithPolicy();
    const c = client(tenant);
    const cyclic: Record<string, unknown> = { amount: 2 };
    cyclic.self = cyclic;
    await expect(c.validate('pay', cyclic)).rejects.toThrow(TypeError);
    let ran = false;
    const tool = c.wrap('pay', async (_args: Record<string, unknown>) => {
      ran = true;
    });
    await expect(tool(cyclic)).rejects.toThrow(TypeError);
    expect(ran).toBe(false);
    await c.validate('pay', { amount: 3 });
    await c.close();
    expect((await decisionsOf(tenant)).map((d) => d.arguments.amount)).toEqual([3]);
  });

  it('with snapshot: false, refuses them at the call too, and reports at send time what changed since', async () => {
    const tenant = await tenantWithPolicy();
    const errors: Error[] = [];
    const c = client(tenant, { onError: (e) => errors.push(e), log: { snapshot: false } });
    await c.validate('pay', { amount: 1 });
    // Decided on its JSON, which it has none of: refused before any decision.
    const cyclic: Record<string, unknown> = { amount: 2 };
    cyclic.self = cyclic;
    await expect(c.validate('pay', cyclic)).rejects.toThrow(TypeError);
    // Kept by reference: what it holds when sent is what is recorded, or refused.
    const changed: Record<string, unknown> = { amount: 4 };
    expect(await c.validate('pay', changed)).toMatchObject({ decision: 'allow', source: 'local' });
    changed.big = 10n;
    await c.validate('pay', { amount: 3 });
    await c.close();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(LogRejectedError);
    expect(errors[0]!.message).toMatch(/cannot be written as JSON/);
    const amounts = (await decisionsOf(tenant)).map((d) => d.arguments.amount);
    expect(amounts.sort()).toEqual([1, 3]);
  });
});

describe('what the service refuses of the log', () => {
  /**
   * A client counting its POST /v1/decisions requests. A `proxy` in front of the service sees each
   * one's batch first (the counts include it): an answer it returns stands for the service's.
   */
  function countingClient(
    tenant: Tenant,
    options: Partial<ClientOptions> = {},
    proxy: (batch: { arguments: { amount: number } }[], posts: number[]) => Response | undefined = () =>
      undefined,
  ) {
    const posts: number[] = [];
    const errors: Error[] = [];
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl,
      live: false,
      onError: (e) => errors.push(e),
      ...options,
      log: { flushIntervalMs: 60_000, ...options.log },
      fetch: async (input, init) => {
        if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
          const batch = JSON.parse(String(init.body));
          posts.push(batch.length);
          const answer = proxy(batch, posts);
          if (answer) return answer;
        }
        return fetch(input, init);
      },
    });
    return { client, posts, errors };
  }

  it('drops only the decision a refused batch names, in one more request', async () => {
    const tenant = await tenantWithPolicy();
    const { client, posts, errors } = countingClient(tenant, { log: { snapshot: false } });
    const kept: Record<string, unknown>[] = [];
    for (let i = 0; i < 6; i++) {
      kept.push({ amount: i });
      await client.validate('pay', kept[i]!);
    }
    // Changed after the call (snapshot: false records it as sent): the server refuses the fourth.
    kept[3]!.note = 'a\u0000b';
    await client.flush();
    // The batch of six, the three before the one named (body/3/...), the two after it.
    expect(posts).toEqual([6, 3, 2]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(LogRejectedError);
    expect((errors[0] as LogRejectedError).cause.message).toMatch(/body\/3\/arguments\/note/);
    expect(JSON.parse((errors[0] as LogRejectedError).body).arguments.amount).toBe(3);
    await client.close();
    const amounts = (await decisionsOf(tenant)).map((d) => d.arguments.amount as number);
    expect(amounts.sort()).toEqual([0, 1, 2, 4, 5]);
  });

  it('halves a batch the service cannot read, and drops only the decision that made it so', async () => {
    const tenant = await tenantWithPolicy();
    const { client, posts, errors } = countingClient(tenant, { log: { snapshot: false } });
    const kept: Record<string, unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      kept.push({ amount: i });
      await client.validate('pay', kept[i]!);
    }
    // Changed after the call: an own "__proto__" member, which the service's JSON reader refuses
    // for the whole body (400 invalid_json, naming no decision).
    Object.defineProperty(kept[2]!, '__proto__', { value: { x: 1 }, enumerable: true });
    await client.flush();
    expect(posts).toEqual([4, 2, 2, 1, 1]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(LogRejectedError);
    expect((errors[0] as LogRejectedError).cause.code).toBe('invalid_json');
    await client.close();
    const amounts = (await decisionsOf(tenant)).map((d) => d.arguments.amount as number);
    expect(amounts.sort()).toEqual([0, 1, 3]);
  });

  it.each([
    [
      400,
      'text/html',
      '<html><body>400 Bad Request: request header or cookie too large (nginx)</body></html>',
    ],
  ])(
    'keeps and retries a batch a proxy answers %i with its own page: nothing is split or dropped',
    async (status, type, page) => {
      const tenant = await tenantWithPolicy();
      let down = true;
      let thirdPost!: () => void;
      const third = new Promise<void>((resolve) => {
        thirdPost = resolve;
      });
      // A load balancer in front of the service refuses the log's requests with a page of its own.
      const { client, posts, errors } = countingClient(tenant, {}, (_batch, sent) => {
        if (sent.length === 3) thirdPost();
        return down ? new Response(page, { status, headers: { 'content-type': type } }) : undefined;
      });
      for (let i = 0; i < 11; i++) await client.validate('pay', { amount: i });
      void client.flush();
      await third;
      // The same batch, sent again as it was: the page says nothing of the decisions it holds.
      expect(posts).toEqual([11, 11, 11]);
      expect(errors.some((e) => e instanceof LogRejectedError)).toBe(false);
      expect(errors.length).toBeGreaterThanOrEqual(2);
      for (const e of errors) expect(e).toMatchObject({ status, code: `http_${status}` });
      expect(errors[0]).toBeInstanceOf(ApiError);
      down = false;
      await client.close();
      expect(errors.some((e) => e instanceof LogRejectedError)).toBe(false);
      const amounts = (await decisionsOf(tenant)).map((d) => d.arguments.amount as number);
      expect(amounts.sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    },
  );

  it("halves batches a proxy's 413 page refuses, and keeps a single decision it still refuses", async () => {
    const tenant = await tenantWithPolicy();
    // A proxy with a body limit of its own: more than 3 decisions, or the decision of amount 7, are too large.
    let strict = true;
    const { client, posts, errors } = countingClient(tenant, {}, (batch) =>
      strict && (batch.length > 3 || batch.some((d) => d.arguments.amount === 7))
        ? new Response('{"message":"Request Entity Too Large"}', {
            status: 413,
            headers: { 'content-type': 'application/json' },
          })
        : undefined,
    );
    for (let i = 0; i < 11; i++) await client.validate('pay', { amount: i });
    void client.flush();
    // Halved down to batches the proxy takes; the one it refuses alone is retried, not dropped.
    await waitFor(() => posts.filter((n) => n === 1).length >= 2, 'single-decision posts');
    expect(posts.slice(0, 3)).toEqual([11, 6, 3]);
    expect(errors.some((e) => e instanceof LogRejectedError)).toBe(false);
    strict = false;
    await client.close();
    expect(errors.some((e) => e instanceof LogRejectedError)).toBe(false);
    const amounts = (await decisionsOf(tenant)).map((d) => d.arguments.amount as number);
    expect(amounts.sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('keeps the decisions of a key without a project, and sends every later call to the service', async () => {
    const tenant = await createTenant(t);
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: asUser(tenant),
      payload: { toolName: 'pay', ...PAY },
    });
    expect(policy.statusCode).toBe(201);
    // A key of the organization that belongs to no project (an older or imported key).
    await t.store.db
      .updateTable('api_keys')
      .set({ project_id: null })
      .where('organization_id', '=', tenant.orgId)
      .execute();
    const { client, posts, errors } = countingClient(tenant);
    expect(await client.validate('pay', { amount: 1 })).toMatchObject({ decision: 'allow', source: 'local' });
    expect(await client.validate('pay', { amount: 500 })).toMatchObject({
      decision: 'deny',
      source: 'local',
    });
    // The service refuses the request whatever it holds: one request, reported once, nothing dropped.
    const flushed = await client.flush().catch((e: unknown) => e);
    expect(flushed).toMatchObject({ status: 400, code: 'missing_project' });
    expect(posts).toEqual([2]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ status: 400, code: 'missing_project' });
    expect(errors.some((e) => e instanceof LogRejectedError)).toBe(false);
    // From then on the service decides (and records) every call, those a policy allows included.
    expect(await client.validate('pay', { amount: 2 })).toMatchObject({
      decision: 'allow',
      source: 'server',
    });
    expect(await client.validate('pay', { amount: 600 })).toMatchObject({
      decision: 'deny',
      source: 'server',
    });
    expect(posts).toEqual([2]);
    expect(errors).toHaveLength(1);
    // close() hands the two it could never record back at once.
    const closing = await client.close().catch((e: unknown) => e);
    expect(closing).toBeInstanceOf(FlushError);
    expect((closing as FlushError).kept).toBe(false);
    expect((closing as FlushError).message).toMatch(/missing_project/);
    expect((closing as FlushError).pending.map((b) => JSON.parse(b).arguments.amount)).toEqual([1, 500]);
    expect(posts).toEqual([2]);
    const logged = await decisionsOf(tenant);
    expect(logged.map((d) => d.arguments.amount).sort()).toEqual([2, 600]);
  });
});
