import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { bearer, createTenant, JWT_SECRET, type TestApp } from '../../test/helpers.js';
import { signIn } from '../../test/revocations.js';
import { SseClient, validateTool, WsClient, waitFor } from '../../test/streams.js';
import { signUserToken } from '../lib/jwt.js';
import { recheckReads } from './access.js';
import { LocalEventBus } from './bus.js';
import { CheckRound } from './checks.js';
import { EventHub, type StreamClient } from './hub.js';

/** Streams of one person opened for each test: enough that a read per stream could not pass as one. */
const STREAMS = 20;

const toolOf = (data: unknown) => (data as { toolName?: string }).toolName;

/** Takes `tenant.userId` out of `orgId`, in the store only (nothing tells the streams). */
const leave = (t: TestApp, userId: string, orgId: string) =>
  t.store.db
    .deleteFrom('memberships')
    .where('user_id', '=', userId)
    .where('organization_id', '=', orgId)
    .execute();

describe('a round of credential checks', () => {
  it('makes each read once and shares it; reads named otherwise are their own', async () => {
    const round = new CheckRound();
    const made: string[] = [];
    const read = (name: string) => async () => {
      made.push(name);
      return name;
    };
    const answers = await Promise.all([
      round.read(['role', 'alice', 'o1'], read('alice o1')),
      round.read(['role', 'alice', 'o1'], read('alice o1 again')),
      round.read(['role', 'alice', 'o2'], read('alice o2')),
      round.read(['role', 'bob', 'o1'], read('bob o1')),
      // Names are compared whole: no two lists of parts are joined into the same key.
      round.read(['role', 'alice,o1'], read('joined')),
      round.read(['organizations', 'alice'], read('organizations')),
    ]);
    expect(answers).toEqual(['alice o1', 'alice o1', 'alice o2', 'bob o1', 'joined', 'organizations']);
    expect(made).toEqual(['alice o1', 'alice o2', 'bob o1', 'joined', 'organizations']);
    // A later round reads again.
    expect(await new CheckRound().read(['role', 'alice', 'o1'], read('next round'))).toBe('next round');
  });

  it('fails every check that shares a failed read, and does not ask the store again in the round', async () => {
    const round = new CheckRound();
    let asked = 0;
    const failing = async () => {
      asked++;
      throw new Error('store unavailable');
    };
    const checks = Array.from({ length: 5 }, () => round.read(['role', 'alice', 'o1'], failing));
    for (const check of checks) await expect(check).rejects.toThrow('store unavailable');
    await expect(round.read(['role', 'alice', 'o1'], failing)).rejects.toThrow('store unavailable');
    expect(asked).toBe(1);
  });
});

describe('EventHub.heartbeat', () => {
  function client(kind: StreamClient['kind']) {
    const c = {
      kind,
      types: null,
      gone: false,
      pings: 0,
      rounds: [] as (CheckRound | undefined)[],
      heartbeat() {
        c.pings++;
      },
      checkCredentials(round?: CheckRound) {
        c.rounds.push(round);
      },
      send() {},
      close() {},
    };
    return c;
  }

  it('pings every connection of the transport at once and spreads their checks over one round', async () => {
    const hub = new EventHub(new LocalEventBus());
    const sse = Array.from({ length: 50 }, () => client('sse'));
    const ws = client('ws');
    const gone = client('sse');
    for (const c of [...sse, ws, gone]) hub.set(c, ['o1']);
    gone.gone = true;
    hub.heartbeat('sse');
    // The keep-alive is not held back; no check is made in the same instant.
    expect(sse.every((c) => c.pings === 1)).toBe(true);
    expect(sse.some((c) => c.rounds.length > 0)).toBe(false);
    expect([ws.pings, gone.pings, hub.size]).toEqual([0, 0, 51]);
    // Within 2 ms per connection every one is checked, all in the same round.
    await waitFor(() => sse.every((c) => c.rounds.length === 1), 'every check');
    const round = sse[0]!.rounds[0];
    expect(round).toBeInstanceOf(CheckRound);
    expect(sse.every((c) => c.rounds[0] === round)).toBe(true);
    expect(ws.rounds).toEqual([]);
    // The next heartbeat is a round of its own.
    hub.heartbeat('sse');
    await waitFor(() => sse.every((c) => c.rounds.length === 2), 'every second check');
    expect(sse[0]!.rounds[1]).not.toBe(round);
    hub.close();
  });
});

describe('SSE heartbeats and the streams of one person', () => {
  const t = useTestApp({}, { streams: { sseHeartbeatMs: 100 }, listen: true });
  const open: SseClient[] = [];
  afterEach(() => {
    vi.restoreAllMocks();
    for (const c of open.splice(0)) c.close();
  });
  const connect = async (orgId: string, headers: Record<string, string>) => {
    const c = await SseClient.open(`${t.url}/v1/events/stream?organizationId=${orgId}`, headers);
    open.push(c);
    expect(c.status).toBe(200);
    await waitFor(() => c.comments.includes('ok'), ':ok');
    return c;
  };
  const pings = (c: SseClient) => c.comments.filter((x) => x === 'ping').length;
  /**
   * Reads made while `probe` gets `rounds` more heartbeats: at most one per round, plus one of the
   * round under way when counting began and one of a round whose ping is still on its way.
   */
  const readsOver = async (probe: SseClient, rounds: number, count: () => number, reset: () => void) => {
    // The checks made as each stream opened are behind us.
    await waitFor(() => pings(probe) >= 2, 'two heartbeats');
    reset();
    const from = pings(probe);
    await waitFor(() => pings(probe) >= from + rounds, `${rounds} heartbeats`);
    return { reads: count(), heartbeats: pings(probe) - from };
  };

  it("reads a person's membership once per heartbeat, whatever the number of their streams", async () => {
    const tenant = await createTenant(t);
    const session = await signIn(t, tenant.userId);
    const roleOf = vi.spyOn(recheckReads, 'roleOf');
    const sessionReads = vi.spyOn(recheckReads, 'session');
    const streams: SseClient[] = [];
    for (let i = 0; i < STREAMS; i++) {
      streams.push(await connect(tenant.orgId, bearer(tenant.token)));
      streams.push(await connect(tenant.orgId, { cookie: session.cookie }));
    }
    const mine = () => roleOf.mock.calls.filter(([, u, o]) => u === tenant.userId && o === tenant.orgId);
    const { reads, heartbeats } = await readsOver(
      streams[0]!,
      5,
      () => mine().length,
      () => {
        roleOf.mockClear();
        sessionReads.mockClear();
      },
    );
    expect(reads).toBeGreaterThan(0);
    expect(reads).toBeLessThanOrEqual(heartbeats + 2);
    // The cookie streams share their session's read too.
    expect(sessionReads.mock.calls.length).toBeGreaterThan(0);
    expect(sessionReads.mock.calls.length).toBeLessThanOrEqual(heartbeats + 2);
    expect(streams.some((c) => c.ended)).toBe(false);
  });

  it('ends every stream of a removed membership, and only those', async () => {
    const user = `many-${Date.now()}`;
    const tenant = await createTenant(t, user);
    const kept = await createTenant(t, user);
    const session = await signIn(t, user);
    const leaving: SseClient[] = [];
    for (let i = 0; i < STREAMS; i++) leaving.push(await connect(tenant.orgId, bearer(tenant.token)));
    leaving.push(await connect(tenant.orgId, { cookie: session.cookie }));
    const staying = [
      await connect(kept.orgId, bearer(kept.token)),
      await connect(kept.orgId, { cookie: session.cookie }),
    ];
    await leave(t, user, tenant.orgId);
    await waitFor(() => leaving.every((c) => c.ended), 'every stream of the membership to end', 5000);
    await validateTool(t, kept, 'still_member');
    for (const c of staying) await c.waitForEvent((e) => toolOf(e.data) === 'still_member', 'event');
    expect(staying.some((c) => c.ended)).toBe(false);
  });

  it('ends a stream whose token expired though the membership read it shares says member', async () => {
    const tenant = await createTenant(t);
    const short = await signUserToken(JWT_SECRET, tenant.userId, 2, t.config);
    const expiring = [await connect(tenant.orgId, bearer(short)), await connect(tenant.orgId, bearer(short))];
    const staying = await connect(tenant.orgId, bearer(tenant.token));
    await waitFor(() => expiring.every((c) => c.ended), 'the streams of the expired token to end', 5000);
    await validateTool(t, tenant, 'after_expiry');
    await staying.waitForEvent((e) => toolOf(e.data) === 'after_expiry', 'event');
    expect(staying.ended).toBe(false);
  });

  it('keeps every stream while the shared read fails, as each stream did alone, and asks once a round', async () => {
    const tenant = await createTenant(t);
    const original = recheckReads.roleOf;
    let down = true;
    const roleOf = vi.spyOn(recheckReads, 'roleOf').mockImplementation(async (ctx, userId, orgId) => {
      if (down && userId === tenant.userId) throw new Error('store unavailable');
      return original(ctx, userId, orgId);
    });
    const streams: SseClient[] = [];
    for (let i = 0; i < STREAMS; i++) streams.push(await connect(tenant.orgId, bearer(tenant.token)));
    // Removed while the store fails: no check says member, and none says otherwise.
    await leave(t, tenant.userId, tenant.orgId);
    const { reads, heartbeats } = await readsOver(
      streams[0]!,
      5,
      () => roleOf.mock.calls.filter(([, u]) => u === tenant.userId).length,
      () => roleOf.mockClear(),
    );
    expect(reads).toBeLessThanOrEqual(heartbeats + 2);
    expect(streams.some((c) => c.ended)).toBe(false);
    // Once the store answers, the next heartbeat ends all of them.
    down = false;
    await waitFor(() => streams.every((c) => c.ended), 'every stream to end', 5000);
  });
});

describe('WebSocket heartbeats and the connections of one person', () => {
  // Long enough that a loaded machine still answers pings in time.
  const t = useTestApp({}, { streams: { wsHeartbeatMs: 250 }, listen: true });
  let wsUrl: string;
  const open: WsClient[] = [];
  beforeAll(() => {
    wsUrl = t.url.replace(/^http/, 'ws');
  });
  afterEach(() => {
    vi.restoreAllMocks();
    for (const c of open.splice(0)) c.close();
  });

  it("reads a person's memberships once per heartbeat, and a membership left stops on every one", async () => {
    const user = `ws-many-${Date.now()}`;
    const first = await createTenant(t, user);
    const second = await createTenant(t, user);
    const organizationsOf = vi.spyOn(recheckReads, 'organizationsOf');
    const clients: WsClient[] = [];
    for (let i = 0; i < STREAMS; i++) {
      const c = await WsClient.open(`${wsUrl}/ws?token=${encodeURIComponent(first.token)}`);
      open.push(c);
      clients.push(c);
    }
    let pings = 0;
    clients[0]!.ws.on('ping', () => pings++);
    await waitFor(() => pings >= 1, 'a heartbeat');
    organizationsOf.mockClear();
    const from = pings;
    await waitFor(() => pings >= from + 4, 'four heartbeats');
    const reads = organizationsOf.mock.calls.filter(([, u]) => u === user).length;
    expect(reads).toBeGreaterThan(0);
    expect(reads).toBeLessThanOrEqual(pings - from + 2);

    await leave(t, user, second.orgId);
    let round = 0;
    await waitFor(
      async () => {
        round++;
        t.ctx.events.publish({ organizationId: second.orgId, type: 'left.org', data: { round } });
        t.ctx.events.publish({ organizationId: first.orgId, type: 'kept.org', data: { round } });
        for (const c of clients)
          await c.waitForFrame((f) => f.type === 'kept.org' && f.data.round === round, 'kept');
        return clients.every((c) => !c.frames.some((f) => f.type === 'left.org' && f.data.round === round));
      },
      'the organization left to be dropped on every connection',
      5000,
    );
    expect(clients.some((c) => c.closed)).toBe(false);
  });
});
