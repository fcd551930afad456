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

function opened(s: McpSessions, owner: { keyId: string; upstreamId: string }): GatewaySession {
  const created = s.create(owner);
  if (typeof created === 'string') throw new Error(created);
  return created;
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

  it('refuses past the total and the per-upstream bound, and frees the slot when a session ends', () => {
    const sessions = make({ perKey: 10, perUpstream: 2, total: 3 });
    const a = { keyId: 'a', upstreamId: 'u' };
    const b = { keyId: 'b', upstreamId: 'u' };
    const a1 = opened(sessions, a);
    opened(sessions, b);
    expect(sessions.create(b)).toMatch(/maximum of 2 sessions/);
    // Session-less calls take the same slots.
    expect(sessions.slot('u')).toBeNull();
    expect(sessions.delete(a1.id, a)).toBe(true);
    const release = sessions.slot('u');
    expect(release).not.toBeNull();
    release!();
    opened(sessions, { keyId: 'c', upstreamId: 'v' });
    opened(sessions, { keyId: 'c', upstreamId: 'v' });
    expect(sessions.create({ keyId: 'd', upstreamId: 'w' })).toMatch(/maximum of 3 MCP sessions/);
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
    s.begin('r2', other, 'tok-2');
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
});
