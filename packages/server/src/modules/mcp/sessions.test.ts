import { afterEach, describe, expect, it } from 'vitest';
import { McpSessions } from './sessions.js';

const open: McpSessions[] = [];
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});

const make = (perKey: number, total: number) => {
  const s = new McpSessions(Date.now, { perKey, total });
  open.push(s);
  return s;
};

describe('McpSessions limits', () => {
  it("evicts a key's own oldest session, never another key's", () => {
    const sessions = make(3, 100);
    const victim = { keyId: 'k-victim', upstreamId: 'u1' };
    const flooder = { keyId: 'k-flood', upstreamId: 'u1' };
    const kept = sessions.create(victim);
    const floods = Array.from({ length: 50 }, () => sessions.create(flooder));
    expect(sessions.get(kept.id, victim)).not.toBeNull();
    // The flooder keeps only its 3 newest.
    expect(floods.filter((f) => sessions.get(f.id, flooder) !== null).map((f) => f.id)).toEqual(
      floods.slice(-3).map((f) => f.id),
    );
    expect(sessions.size).toBe(4);
  });

  it('still bounds the total, oldest first, and forgets deleted and evicted sessions per key', () => {
    const sessions = make(2, 3);
    const a = { keyId: 'a', upstreamId: 'u' };
    const b = { keyId: 'b', upstreamId: 'u' };
    const a1 = sessions.create(a);
    const b1 = sessions.create(b);
    const b2 = sessions.create(b);
    const a2 = sessions.create(a); // total reached: a1 (oldest overall) goes
    expect(sessions.get(a1.id, a)).toBeNull();
    expect(sessions.size).toBe(3);
    expect(sessions.delete(b1.id, b)).toBe(true);
    const b3 = sessions.create(b); // b has one left (b2), so nothing of b is evicted
    expect(sessions.get(b2.id, b)).not.toBeNull();
    expect(sessions.get(b3.id, b)).not.toBeNull();
    expect(sessions.get(a2.id, a)).not.toBeNull();
  });
});
