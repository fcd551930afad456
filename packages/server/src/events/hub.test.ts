import { describe, expect, it } from 'vitest';
import { waitFor } from '../../test/streams.js';
import { LocalEventBus } from './bus.js';
import { EventHub, type Frames, type StreamClient } from './hub.js';

function client(types: string[] | null = null, fail = false) {
  const got: string[] = [];
  const c: StreamClient & { got: string[]; closed: string | null } = {
    kind: 'sse',
    types: types ? new Set(types) : null,
    gone: false,
    got,
    closed: null,
    send(frames: Frames) {
      if (fail) throw new Error('broken socket');
      got.push(frames.sse);
    },
    heartbeat() {},
    checkCredentials() {},
    close(reason: string) {
      c.closed = reason;
    },
  };
  return c;
}

const event = (org: string, type: string) => ({ organizationId: org, type, data: { n: 1 } });

describe('EventHub', () => {
  it('fans out after the publisher returns, by organization and type, past a failing client', async () => {
    const bus = new LocalEventBus();
    const hub = new EventHub(bus);
    const all = client();
    const filtered = client(['policy.created']);
    const broken = client(null, true);
    const other = client();
    hub.set(broken, ['o1']);
    hub.set(all, ['o1']);
    hub.set(filtered, ['o1']);
    hub.set(other, ['o2']);
    bus.publish(event('o1', 'decision.created'));
    bus.publish(event('o1', 'policy.created'));
    // Nothing was written inside publish(): the publisher never waits on sockets.
    expect(all.got).toEqual([]);
    await waitFor(() => all.got.length === 2, 'delivery');
    expect(all.got[0]).toBe('event: decision.created\ndata: {"n":1}\n\n');
    expect(filtered.got).toEqual(['event: policy.created\ndata: {"n":1}\n\n']);
    expect(other.got).toEqual([]);
  });

  it('re-indexes a connection whose organizations change, and forgets removed ones', async () => {
    const bus = new LocalEventBus();
    const hub = new EventHub(bus);
    const c = client();
    hub.set(c, ['o1']);
    hub.set(c, ['o2', 'o3']);
    expect(hub.size).toBe(1);
    bus.publish(event('o1', 'a'));
    bus.publish(event('o3', 'b'));
    await waitFor(() => c.got.length === 1, 'delivery');
    expect(c.got[0]).toContain('event: b');
    hub.remove(c);
    expect(hub.size).toBe(0);
    hub.close();
  });

  it('ends a connection registered after it closed (opened while the server shuts down)', () => {
    const hub = new EventHub(new LocalEventBus());
    const open = client();
    hub.set(open, ['o1']);
    hub.close('server shutting down');
    expect(open.closed).toBe('server shutting down');
    // A stream whose credentials were still being checked when the shutdown began registers now.
    const late = client();
    hub.set(late, ['o1']);
    expect(late.closed).toBe('server shutting down');
    expect(hub.size).toBe(0);
    expect(hub.clients()).toEqual([]);
  });
});
