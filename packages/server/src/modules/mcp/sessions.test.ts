import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_SESSION_LIMITS, type SessionLimits } from './model.js';
import { PendingReply } from './reply.js';
import { type GatewaySession, McpSessions } from './sessions.js';

const open: McpSessions[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

let clock = 0;
const make = (limits: Partial<SessionLimits>) => {
  const s = new McpSessions(() => clock, { ...DEFAULT_SESSION_LIMITS, ...limits });
  open.push(s);
  return s;
};

/** A session of `owner`, in the organization `organizationId` (default: one organization for all). */
function opened(
  s: McpSessions,
  owner: { keyId: string; upstreamId: string; organizationId?: string },
): GatewaySession {
  const created = s.create({ organizationId: 'o', ...owner });
  if (typeof created === 'string') throw new Error(created);
  return created;
}

/** Sessions of each organization still held. */
function heldBy(all: GatewaySession[]): Record<string, number> {
  const n: Record<string, number> = {};
  for (const s of all) if (!s.closed) n[s.owner.organizationId] = (n[s.owner.organizationId] ?? 0) + 1;
  return n;
}

describe('McpSessions limits', () => {
  it("ends a key's own least recently used session, never another key's", () => {
    const sessions = make({ perKey: 3 });
    const victim = { keyId: 'k-victim', upstreamId: 'u1' };
    const flooder = { keyId: 'k-flood', upstreamId: 'u1' };
    const kept = opened(sessions, victim);
    const first = opened(sessions, flooder);
    const floods = Array.from({ length: 50 }, () => {
      // The first one stays in use, so it is never the least recently used.
      sessions.get(first.id, flooder);
      return opened(sessions, flooder);
    });
    expect(sessions.get(kept.id, victim)).not.toBeNull();
    expect(sessions.get(first.id, flooder)).not.toBeNull();
    expect(floods.filter((f) => sessions.get(f.id, flooder) !== null).map((f) => f.id)).toEqual(
      floods.slice(-2).map((f) => f.id),
    );
    expect(floods[0]!.closed).toBe(true);
    expect(sessions.size).toBe(4);
  });

  it('refuses past the per-upstream bound, and frees the slot when a session ends', () => {
    const sessions = make({ perKey: 10, perUpstream: 2 });
    const a = { keyId: 'a', upstreamId: 'u' };
    const b = { keyId: 'b', upstreamId: 'u' };
    const a1 = opened(sessions, a);
    const b1 = opened(sessions, b);
    expect(sessions.create({ ...b, organizationId: 'o' })).toMatch(/maximum of 2 sessions/);
    // Session-less calls take the same slots.
    expect(sessions.slot('u')).toBeNull();
    expect(sessions.delete(a1.id, a)).toBe(true);
    const release = sessions.slot('u');
    expect(release).not.toBeNull();
    release!();
    // A refused session ends nothing, not even for a bound it is past too.
    const tight = make({ perKey: 1, perUpstream: 1 });
    const only = opened(tight, a);
    const held = tight.slot('v');
    expect(held).not.toBeNull();
    expect(tight.create({ keyId: 'a', upstreamId: 'v', organizationId: 'o' })).toMatch(
      /maximum of 1 sessions/,
    );
    expect(only.closed).toBe(false);
    // While a session ending for the key's bound frees the upstream slot it needs.
    expect(opened(tight, a).closed).toBe(false);
    expect(only.closed).toBe(true);
    expect(b1.closed).toBe(false);
  });

  it('keeps one organization, however many keys and upstreams it floods with, from locking another out', () => {
    // The defaults: 100 per key, 1000 per upstream, 10000 in all, and 1000 per organization.
    const sessions = make({});
    const flood: GatewaySession[] = [];
    for (let i = 0; i < 10_000; i++)
      flood.push(
        opened(sessions, { keyId: `k${i % 100}`, upstreamId: `u${i % 10}`, organizationId: 'flood' }),
      );
    expect(heldBy(flood)).toEqual({ flood: DEFAULT_SESSION_LIMITS.perOrganization });
    // The ones still held are the organization's most recently used.
    expect(flood.filter((f) => !f.closed)).toEqual(flood.slice(-DEFAULT_SESSION_LIMITS.perOrganization));
    const other = opened(sessions, { keyId: 'victim', upstreamId: 'v', organizationId: 'victim' });
    expect(other.closed).toBe(false);
    expect(sessions.size).toBe(DEFAULT_SESSION_LIMITS.perOrganization + 1);
  });

  it("ends an organization's own least recently used session past its bound, never another's", () => {
    const sessions = make({ perKey: 10, perOrganization: 3 });
    const other = opened(sessions, { keyId: 'b1', upstreamId: 'ub', organizationId: 'b' });
    const first = opened(sessions, { keyId: 'a1', upstreamId: 'u1', organizationId: 'a' });
    const a = Array.from({ length: 5 }, (_, i) => {
      // The first stays in use, so it is never the least recently used.
      sessions.get(first.id, first.owner);
      return opened(sessions, { keyId: `a${i + 2}`, upstreamId: `u${i}`, organizationId: 'a' });
    });
    expect(first.closed).toBe(false);
    expect(a.map((s) => s.closed)).toEqual([true, true, true, false, false]);
    expect(other.closed).toBe(false);
    expect(heldBy([other, first, ...a])).toEqual({ a: 3, b: 1 });
  });

  it('makes room in a full instance from the organization holding the most, and refuses nobody', () => {
    const sessions = make({ total: 6, perOrganization: 100, perKey: 100 });
    const all: GatewaySession[] = [];
    const open = (org: string) => {
      const s = opened(sessions, { keyId: `${org}-key`, upstreamId: `${org}-up`, organizationId: org });
      all.push(s);
      return s;
    };
    const a = Array.from({ length: 6 }, () => open('a'));
    // Under its share, b takes from a (the largest), a's least recently used first.
    open('b');
    expect(a[0]!.closed).toBe(true);
    expect(heldBy(all)).toEqual({ a: 5, b: 1 });
    open('b');
    open('b');
    expect(heldBy(all)).toEqual({ a: 3, b: 3 });
    // At an equal share, b makes room from its own sessions: a keeps what it has.
    const bFirst = all.find((s) => s.owner.organizationId === 'b')!;
    open('b');
    expect(heldBy(all)).toEqual({ a: 3, b: 3 });
    expect(bFirst.closed).toBe(true);
    // A newcomer holding nothing always gets one, from an organization holding the most.
    open('c');
    expect(heldBy(all)).toEqual({ a: 2, b: 3, c: 1 });
    expect(sessions.size).toBe(6);
  });

  it('ends every session of revoked keys or of a deleted organization, and only those', async () => {
    const sessions = make({});
    const k1 = [
      opened(sessions, { keyId: 'k1', upstreamId: 'u' }),
      opened(sessions, { keyId: 'k1', upstreamId: 'v' }),
    ];
    const k2 = opened(sessions, { keyId: 'k2', upstreamId: 'u' });
    const elsewhere = opened(sessions, { keyId: 'k3', upstreamId: 'w', organizationId: 'p' });
    await sessions.endKeys(['k1', 'unknown'], 'the API key was revoked');
    expect(k1.map((s) => s.closed)).toEqual([true, true]);
    expect(sessions.get(k1[0]!.id, k1[0]!.owner)).toBeNull();
    expect([k2.closed, elsewhere.closed]).toEqual([false, false]);
    // Their upstream slots are free again.
    expect(sessions.slot('v')).not.toBeNull();
    await sessions.endOrganization('p', 'the organization was deleted');
    expect(elsewhere.closed).toBe(true);
    expect(k2.closed).toBe(false);
    expect(sessions.size).toBe(1);
    // A key that was revoked can be given sessions again only by a new key: the index is clean.
    expect(opened(sessions, { keyId: 'k1', upstreamId: 'u' }).closed).toBe(false);
    expect(sessions.size).toBe(2);
  });

  it('never hands a session to another key or for another upstream', () => {
    const sessions = make({});
    const s = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    expect(sessions.get(s.id, { keyId: 'b', upstreamId: 'u' })).toBeNull();
    expect(sessions.get(s.id, { keyId: 'a', upstreamId: 'v' })).toBeNull();
    expect(sessions.delete(s.id, { keyId: 'b', upstreamId: 'u' })).toBe(false);
    expect(sessions.get(s.id, { keyId: 'a', upstreamId: 'u' })).toBe(s);
  });

  it('ends idle sessions, but not one with a request in flight', async () => {
    clock = 0;
    const sessions = make({ idleMs: 1000 });
    const owner = { keyId: 'a', upstreamId: 'u' };
    const idle = opened(sessions, owner);
    const busy = opened(sessions, owner);
    const reply = new PendingReply(false);
    busy.begin(1, reply, undefined);
    clock = 5000;
    sessions.sweep();
    expect(idle.closed).toBe(true);
    expect(busy.closed).toBe(false);
    busy.end(1);
    sessions.sweep();
    expect(busy.closed).toBe(true);
  });
});

describe('GatewaySession routing', () => {
  it('sends progress to the request that carries its token, and waits for a stream otherwise', async () => {
    const sessions = make({});
    const s = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    const withToken = new PendingReply(true, s);
    const other = new PendingReply(true, s);
    s.begin('r1', withToken, 'tok-1');
    s.sentAs('r1', 1);
    s.begin('r2', other, 'tok-2');
    s.sentAs('r2', 2);
    s.deliver({
      jsonrpc: '2.0',
      method: 'notifications/progress',
      params: { progressToken: 'tok-1', progress: 1 },
    });
    expect(await withToken.outcome).toEqual({ kind: 'stream' });
    // A JSON-only request cannot carry anything; with no stream, the message waits in the backlog.
    const json = new PendingReply(false);
    const t = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    t.begin('x', json, undefined);
    expect(t.deliver({ jsonrpc: '2.0', id: 7, method: 'roots/list' })).toBe(true);
    expect(t.answers(7)).toBe(true);
    expect(t.answers(7)).toBe(false);
  });

  it('routes nothing to a request whose id is taken but that has not reached the upstream', async () => {
    const sessions = make({});
    const s = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    const forwarded = new PendingReply(true, s);
    const checking = new PendingReply(true, s);
    s.begin('sent', forwarded, 'tok-a');
    s.sentAs('sent', 1);
    // Taken later (the latest in flight), still at its policy check: nothing was sent for it.
    s.begin('checking', checking, 'tok-b');
    s.deliver({ jsonrpc: '2.0', id: 9, method: 'sampling/createMessage', params: {} });
    s.deliver({
      jsonrpc: '2.0',
      method: 'notifications/progress',
      params: { progressToken: 'tok-b', progress: 1 },
    });
    expect(await forwarded.outcome).toEqual({ kind: 'stream' });
    checking.finish({ jsonrpc: '2.0', id: 'checking', result: {} });
    // A JSON answer: nothing had been pushed to it.
    expect(await checking.outcome).toMatchObject({ kind: 'json' });
  });

  it('stops counting an upstream request dropped from the backlog as waiting', () => {
    const sessions = make({ backlog: 2 });
    const s = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    // No stream and no request in flight: everything waits in the backlog of 2, the oldest dropped.
    for (let id = 0; id < 300; id++) {
      expect(s.deliver({ jsonrpc: '2.0', id, method: 'ping' })).toBe(true);
      s.deliver({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: id } });
    }
    // 300 requests were taken (the dropped ones no longer count against the 100); the one still
    // held can be answered, a dropped one cannot.
    expect(s.answers(299)).toBe(true);
    expect(s.answers(0)).toBe(false);
  });

  it('gives back the replay budget of a streamed reply that finishes after its session ended', async () => {
    const sessions = make({});
    const s = opened(sessions, { keyId: 'a', upstreamId: 'u' });
    const reply = new PendingReply(true, s);
    s.begin(1, reply, 'tok');
    s.sentAs(1, 1);
    s.deliver({
      jsonrpc: '2.0',
      method: 'notifications/progress',
      params: { progressToken: 'tok', progress: 1 },
    });
    expect(await reply.outcome).toEqual({ kind: 'stream' });
    expect(sessions.replayBudget.used).toBeGreaterThan(0);
    await sessions.end(s.id, 'the client ended it');
    expect(sessions.replayBudget.used).toBe(0);
    // The request in flight is answered once its upstream session is gone: nothing of it is held.
    reply.finish({ jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'x'.repeat(1000) } });
    expect(sessions.replayBudget.used).toBe(0);
  });
});
