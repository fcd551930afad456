import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { createTenant, gate, type Tenant } from '../../test/helpers.js';
import { hashJson } from '../ledger/canonical.js';
import type { Clock } from './clock.js';
import {
  type Claim,
  DEFAULT_STALE_CLAIM_MS,
  type IdempotencyErrors,
  idempotencyHooks,
} from './idempotency.js';
import { createIdempotencyStore, type IdempotencyRow, type IdempotencyStore } from './idempotency-store.js';
import type { ScopeResolver } from './scope.js';

const BASE = Date.parse('2026-11-21T12:00:00.000Z');
let offset = 0;
const clock: Clock = { now: () => new Date(BASE + offset) };

const t = useTestApp({}, { clock });
let a: Tenant;
beforeAll(async () => {
  a = await createTenant(t);
});

const refusal = (statusCode: number, code: string) => (message: string) =>
  Object.assign(new Error(message), { statusCode, code });
const ERRORS: IdempotencyErrors = {
  invalidKey: refusal(400, 'invalid_key'),
  reused: refusal(400, 'reused'),
  inProgress: refusal(409, 'in_progress'),
};

/** What the handler does with the next request: wait for `until`, then answer `status` (and Retry-After). */
interface Plan {
  until?: Promise<void>;
  status: number;
  retryAfter?: boolean;
  /** Resolved once the request reached the handler. */
  reached?: () => void;
}

/**
 * A route taking Idempotency-Keys whose handler runs the queued plans in arrival order (and adds the
 * claim each request holds to `claims`).
 */
async function appWith(
  store: IdempotencyStore,
  plans: Plan[],
  claims: Claim[] = [],
): Promise<FastifyInstance> {
  const scope: ScopeResolver = async () =>
    ({ organizationId: a.orgId, projectId: null, principal: { kind: 'user', userId: 'u-1' } }) as never;
  const hooks = idempotencyHooks({ store, scope, clock, errors: ERRORS, surface: 'lib-test:' });
  const app = Fastify();
  app.post('/work', { preHandler: hooks.preHandler, onSend: hooks.onSend }, async (req, reply) => {
    const plan = plans.shift();
    if (!plan) throw new Error('no plan for this request');
    const claim = hooks.claimOf(req);
    if (claim) claims.push(claim);
    plan.reached?.();
    await plan.until;
    if (plan.retryAfter) reply.header('retry-after', '1');
    return reply.code(plan.status).send({ served: plan.status, at: clock.now().toISOString() });
  });
  await app.ready();
  return app;
}

const send = (app: FastifyInstance, key: string) =>
  app.inject({ method: 'POST', url: '/work', headers: { 'idempotency-key': key }, payload: { n: 1 } });

/** A request held in the handler until `release()`; `reached` resolves once it got there. */
function held(status: number, retryAfter = false) {
  const g = gate();
  const r = gate();
  const plan: Plan = { until: g.opened, status, retryAfter, reached: r.open };
  return { plan, release: g.open, reached: r.opened };
}

describe('idempotencyHooks: a request answers and frees only its own claim', () => {
  const apps: FastifyInstance[] = [];
  afterAll(async () => {
    for (const app of apps) await app.close();
  });

  it('does not store the answer of a request whose claim was taken over into the new claim', async () => {
    const first = held(201);
    const second = held(202);
    const plans: Plan[] = [first.plan, second.plan];
    const store = createIdempotencyStore(t.store.db);
    // Two instances sharing the store: one cannot tell a stalled request of the other from a dead one.
    const app = await appWith(store, plans);
    const other = await appWith(store, plans);
    apps.push(app, other);
    try {
      const one = send(app, 'taken-over');
      await first.reached;
      offset = DEFAULT_STALE_CLAIM_MS + 1000;
      // The first claim looks abandoned to the other instance: the second request takes the key over and runs.
      const two = send(other, 'taken-over');
      await second.reached;
      first.release();
      expect((await one).statusCode).toBe(201);
      // The key is the second request's, still unanswered: the first one's answer went nowhere.
      const meanwhile = await send(app, 'taken-over');
      expect(meanwhile.statusCode).toBe(409);
      second.release();
      const done = await two;
      expect(done.statusCode).toBe(202);
      const replay = await send(app, 'taken-over');
      expect([replay.statusCode, replay.headers['idempotent-replayed']]).toEqual([202, 'true']);
      expect(replay.json()).toEqual(done.json());
    } finally {
      first.release();
      second.release();
      offset = 0;
    }
  });

  it('a takeover is a claim of its own that keeps the time its request was first claimed', async () => {
    const held3 = [held(201), held(202), held(203)];
    const plans: Plan[] = held3.map((h) => h.plan);
    const claims: Claim[] = [];
    const store = createIdempotencyStore(t.store.db);
    // Three instances: each takes over the claim of the one before, still running there.
    const apps3 = [
      await appWith(store, plans, claims),
      await appWith(store, plans, claims),
      await appWith(store, plans, claims),
    ];
    apps.push(...apps3);
    const at = (ms: number) => new Date(BASE + ms).toISOString();
    try {
      const sent = [];
      for (const [i, app] of apps3.entries()) {
        offset = i * (DEFAULT_STALE_CLAIM_MS + 1000);
        sent.push(send(app, 'kept-origin'));
        await held3[i]!.reached;
      }
      const stale = DEFAULT_STALE_CLAIM_MS + 1000;
      expect(claims).toEqual(
        [0, stale, 2 * stale].map((ms) => expect.objectContaining({ claimedAt: at(ms), originAt: at(0) })),
      );
      const row = await store.key(a.orgId, 'lib-test:-/kept-origin');
      expect([row?.created_at, row?.origin_at]).toEqual([at(2 * stale), at(0)]);
      for (const h of held3) h.release();
      const answers = await Promise.all(sent);
      expect(answers.map((r) => r.statusCode)).toEqual([201, 202, 203]);
      // The key is the last claim's: its answer is kept.
      const replay = await send(apps3[0]!, 'kept-origin');
      expect([replay.statusCode, replay.headers['idempotent-replayed']]).toEqual([203, 'true']);
    } finally {
      for (const h of held3) h.release();
      offset = 0;
    }
  });

  it('takes over only the unanswered claim it read, in one write', async () => {
    const store = createIdempotencyStore(t.store.db);
    const key = 'lib-test:-/take-over';
    const at = (ms: number) => new Date(BASE + ms).toISOString();
    expect(await store.takeKey(a.orgId, key, 'h', at(0))).toBe(true);
    expect((await store.key(a.orgId, key))?.origin_at).toBeNull();
    expect(await store.takeOver(a.orgId, key, at(0), at(1))).toBe(true);
    // A second request that read the same claim finds it gone: the key is the first one's.
    expect(await store.takeOver(a.orgId, key, at(0), at(2))).toBe(false);
    expect(await store.takeOver(a.orgId, key, at(1), at(3))).toBe(true);
    const row = await store.key(a.orgId, key);
    expect([row?.created_at, row?.origin_at, row?.request_hash]).toEqual([at(3), at(0), 'h']);
    expect(await store.completeKey(a.orgId, key, at(3), 200, '{}')).toBe(true);
    // An answered claim is never taken over.
    expect(await store.takeOver(a.orgId, key, at(3), at(4))).toBe(false);
    expect((await store.key(a.orgId, key))?.status_code).toBe(200);
  });

  it('keeps the key of a server error when whether its request did its work cannot be read', async () => {
    let recover: () => Promise<{ status: number; response: string } | null> = async () => {
      throw new Error('the store did not answer');
    };
    const scope: ScopeResolver = async () =>
      ({ organizationId: a.orgId, projectId: null, principal: { kind: 'user', userId: 'u-1' } }) as never;
    const hooks = idempotencyHooks({
      store: createIdempotencyStore(t.store.db),
      scope,
      clock,
      errors: ERRORS,
      surface: 'lib-test:',
      recover: async () => recover(),
    });
    const statuses = [503, 201];
    const app = Fastify();
    app.post('/work', { preHandler: hooks.preHandler, onSend: hooks.onSend }, async (_req, reply) =>
      reply.code(statuses.shift() ?? 500).send({ ok: true }),
    );
    await app.ready();
    apps.push(app);
    try {
      expect((await send(app, 'unreadable')).statusCode).toBe(503);
      // Freed, the request sent again would run again, though it may have done its work.
      expect((await send(app, 'unreadable')).statusCode).toBe(409);
      expect(statuses).toEqual([201]);
      offset = DEFAULT_STALE_CLAIM_MS + 1000;
      recover = async () => null;
      // Stale, it is looked up again: not done, it is taken over and runs.
      expect((await send(app, 'unreadable')).statusCode).toBe(201);
      expect((await send(app, 'unreadable')).headers['idempotent-replayed']).toBe('true');
    } finally {
      offset = 0;
    }
  });

  it('does not free the new claim when the request whose claim was taken over fails', async () => {
    for (const [name, failing] of [
      ['5xx', held(503)],
      ['retry-after', held(409, true)],
    ] as const) {
      const second = held(201);
      const plans: Plan[] = [failing.plan, second.plan, { status: 200 }];
      const store = createIdempotencyStore(t.store.db);
      const app = await appWith(store, plans);
      const other = await appWith(store, plans);
      apps.push(app, other);
      const key = `failed-${name}`;
      try {
        const one = send(app, key);
        await failing.reached;
        offset = DEFAULT_STALE_CLAIM_MS + 1000;
        const two = send(other, key);
        await second.reached;
        failing.release();
        await one;
        // Still the second request's key: the same request waits for it instead of running a third time.
        expect((await send(app, key)).statusCode).toBe(409);
        expect(plans).toHaveLength(1);
        second.release();
        expect((await two).statusCode).toBe(201);
        expect((await send(app, key)).headers['idempotent-replayed']).toBe('true');
      } finally {
        failing.release();
        second.release();
        offset = 0;
      }
    }
  });

  it('never takes over a claim whose request still runs in the same process', async () => {
    const first = held(201);
    const plans: Plan[] = [first.plan];
    const app = await appWith(createIdempotencyStore(t.store.db), plans);
    apps.push(app);
    try {
      const one = send(app, 'still-running');
      await first.reached;
      offset = 10 * DEFAULT_STALE_CLAIM_MS;
      expect((await send(app, 'still-running')).statusCode).toBe(409);
      first.release();
      const done = await one;
      expect(done.statusCode).toBe(201);
      const replay = await send(app, 'still-running');
      expect([replay.statusCode, replay.body]).toEqual([201, done.body]);
      expect(plans).toHaveLength(0);
    } finally {
      first.release();
      offset = 0;
    }
  });

  it('a takeover deletes only the unanswered claim it read: an answer stored meanwhile is replayed', async () => {
    const real = createIdempotencyStore(t.store.db);
    const key = 'lib-test:-/answered-late';
    const hash = hashJson({ method: 'POST', path: '/work', body: { n: 1 } });
    const claimedAt = new Date(BASE - DEFAULT_STALE_CLAIM_MS - 1000).toISOString();
    await real.takeKey(a.orgId, key, hash, claimedAt);
    const original = JSON.stringify({ served: 200, at: 'the original request' });
    let reads = 0;
    // The stale claim is read unanswered; its request answers right after that read.
    const racing: IdempotencyStore = {
      ...real,
      async key(org, k) {
        const row = await real.key(org, k);
        if (k === key && reads++ === 0) {
          await t.store.db
            .withTables<{ gateway_idempotency: IdempotencyRow }>()
            .updateTable('gateway_idempotency')
            .set({ status_code: 200, response: original })
            .where('organization_id', '=', org)
            .where('idempotency_key', '=', k)
            .execute();
        }
        return row;
      },
    };
    const plans: Plan[] = [{ status: 201 }];
    const app = await appWith(racing, plans);
    apps.push(app);
    const res = await send(app, 'answered-late');
    expect([res.statusCode, res.headers['idempotent-replayed'], res.body]).toEqual([200, 'true', original]);
    expect(plans).toHaveLength(1);
  });
});
