import { describe, expect, it } from 'vitest';
import { ReplayLog } from './replay.js';

describe('ReplayLog (SSE resumption per MCP session)', () => {
  it("numbers events across the session's streams and replays only the named stream after the id", () => {
    const log = new ReplayLog({ events: 100, bytes: 1 << 20, totalBytes: 1 << 30 });
    const get = log.stream('g');
    const post = log.stream('p');
    const a = log.append(get, '{"a":1}');
    const b = log.append(post, '{"b":1}');
    const c = log.append(get, '{"c":1}', 'decision');
    const d = log.append(post, '{"d":1}');
    expect([a, b, c, d]).toEqual(['g1-1', 'p2-2', 'g1-3', 'p2-4']);
    expect(log.after(a)).toEqual({
      stream: 'g1',
      kind: 'g',
      events: [{ id: 'g1-3', type: 'decision', data: '{"c":1}' }],
    });
    expect(log.after(b)?.events.map((e) => e.id)).toEqual(['p2-4']);
    expect(log.after(d)).toEqual({ stream: 'p2', kind: 'p', events: [] });
  });

  it('refuses ids it did not issue and ids whose later events were dropped', () => {
    const log = new ReplayLog({ events: 3, bytes: 1 << 20, totalBytes: 1 << 30 });
    const s = log.stream('g');
    const ids = [1, 2, 3, 4, 5].map((i) => log.append(s, `{"n":${i}}`));
    // Held: 3, 4, 5. After 2 is still whole; after 1, event 2 is gone.
    expect(log.after(ids[1]!)?.events.map((e) => e.id)).toEqual(['g1-3', 'g1-4', 'g1-5']);
    expect(log.after(ids[0]!)).toBeNull();
    for (const bad of ['', 'g1', 'g1-6', 'g2-1', 'x1-1', 'g0-1', 'g1-01', '1-1', `g1-${'9'.repeat(40)}`])
      expect(log.after(bad), bad).toBeNull();
  });

  it('refuses a well-formed id whose event was on another stream, or of another kind, than the one it names', () => {
    const log = new ReplayLog({ events: 3, bytes: 1 << 20, totalBytes: 1 << 30 });
    const post = log.stream('p');
    const get = log.stream('g');
    const a = log.append(post, '{"a":1}');
    const b = log.append(get, '{"b":1}');
    expect([a, b]).toEqual(['p1-1', 'g2-2']);
    // Event 1 was p1's and event 2 was g2's: every other pairing names an event never sent.
    for (const bad of ['g1-1', 'p2-1', 'g2-1', 'p1-2', 'g1-2', 'p2-2'])
      expect(log.after(bad), bad).toBeNull();
    expect(log.after(a)).toEqual({ stream: 'p1', kind: 'p', events: [] });
    expect(log.after(b)).toEqual({ stream: 'g2', kind: 'g', events: [] });
    // Once event 2 is the newest dropped one, resuming right after it still works, and still only on g2.
    const later = ['{"c":1}', '{"d":1}', '{"e":1}'].map((d) => log.append(get, d));
    expect(log.after(b)?.events.map((e) => e.id)).toEqual(later);
    expect(log.after('p1-2')).toBeNull();
    expect(log.after('p2-2')).toBeNull();
    expect(log.after(a)).toBeNull();
  });

  it('keeps within its byte bound, dropping the oldest events first', () => {
    const log = new ReplayLog({ events: 1000, bytes: 100, totalBytes: 1 << 30 });
    const s = log.stream('p');
    const first = log.append(s, 'x'.repeat(60));
    const second = log.append(s, 'y'.repeat(60));
    // The first event is gone, but everything after it is held: resuming after it still works.
    expect(log.after(first)?.events.map((e) => e.id)).toEqual([second]);
    expect(log.after('p1-0')).toBeNull();
    const third = log.append(s, 'z'.repeat(30));
    expect(log.after(second)?.events.map((e) => e.id)).toEqual([third]);
    // An event larger than the bound alone is not kept: resuming before it is refused.
    log.append(s, 'w'.repeat(200));
    expect(log.after(third)).toBeNull();
  });

  it('stays bounded over many events', () => {
    const log = new ReplayLog({ events: 10, bytes: 1 << 20, totalBytes: 1 << 30 });
    const s = log.stream('g');
    let last = '';
    for (let i = 0; i < 5000; i++) last = log.append(s, `{"i":${i}}`);
    expect(log.after(last)?.events).toEqual([]);
    expect(log.after('g1-4990')?.events.length).toBe(10);
    expect(log.after('g1-4989')).toBeNull();
  });

  it('shares an instance-wide byte budget: a session past it drops its own oldest events, and an ended one gives its bytes back', () => {
    const limits = { events: 1000, bytes: 1000, totalBytes: 150 };
    const budget = { used: 0 };
    const a = new ReplayLog(limits, budget);
    const b = new ReplayLog(limits, budget);
    const sa = a.stream('g');
    const sb = b.stream('g');
    const a1 = a.append(sa, 'a'.repeat(100));
    expect(budget.used).toBe(100);
    b.append(sb, 'b'.repeat(100));
    // b had to make room: its own event went, a's stayed.
    expect(budget.used).toBeLessThanOrEqual(150);
    expect(a.after(a1)).toEqual({ stream: 'g1', kind: 'g', events: [] });
    a.clear();
    expect(budget.used).toBe(0);
    const b2 = b.append(sb, 'c'.repeat(100));
    expect(b.after(b2)?.events).toEqual([]);
    expect(budget.used).toBe(100);
  });

  it('counts nothing appended after its session ended against the instance budget', () => {
    const budget = { used: 0 };
    const log = new ReplayLog({ events: 1000, bytes: 1 << 20, totalBytes: 1 << 20 }, budget);
    const s = log.stream('p');
    log.append(s, 'a'.repeat(100));
    log.clear();
    expect(budget.used).toBe(0);
    // A reply that finishes after its session ended still gets an id for its last event.
    expect(log.append(s, 'b'.repeat(100))).toBe('p1-2');
    expect(budget.used).toBe(0);
  });
});
