import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL, waitFor } from '../../test/streams.js';
import { type CacheTargets, InvalidationBroadcaster } from './invalidation.js';
import { RedisLink, type SubscriberCheck } from './redis.js';

/** Records what the broadcaster does to the caches; the real caches are exercised in instances.test. */
function fakeTargets() {
  const calls: string[] = [];
  const targets = {
    policies: {
      onInvalidate: null as ((org: string, tool: string | null) => void) | null,
      invalidate: (org: string, tool: string | null, broadcast: boolean) =>
        calls.push(`policy ${org} ${tool} ${broadcast}`),
      pause: () => calls.push('policies paused'),
      resume: () => calls.push('policies resumed'),
    },
    keys: {
      onForget: null as ((what: { keyIds?: string[]; organizationId?: string }) => void) | null,
      forgetKeys: (ids: string[], broadcast: boolean) => calls.push(`keys ${ids} ${broadcast}`),
      forgetOrganization: (org: string, broadcast: boolean) => calls.push(`org ${org} ${broadcast}`),
      pause: () => calls.push('keys paused'),
      resume: () => calls.push('keys resumed'),
    },
    sessions: {
      onEnd: null as ((key: string) => void) | null,
      ended: (key: string, broadcast: boolean) => calls.push(`session ${key} ${broadcast}`),
    },
  };
  return { calls, targets, asTargets: targets as unknown as CacheTargets };
}

describe('InvalidationBroadcaster', () => {
  const prefix = redisPrefix();
  const closers: Array<() => Promise<unknown>> = [];
  const warnings: string[] = [];
  const errors: string[] = [];
  const log = {
    warn: (_: object, msg: string) => warnings.push(msg),
    error: (_: object, msg: string) => errors.push(msg),
    info() {},
  };

  const instance = async (ackTimeoutMs = 2000, check?: SubscriberCheck, url = TEST_REDIS_URL) => {
    const link = await RedisLink.connect(url, prefix, log, { check });
    closers.push(() => link.close());
    const f = fakeTargets();
    const b = await InvalidationBroadcaster.create(link, f.asTargets, log, ackTimeoutMs);
    return { link, b, ...f };
  };

  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
    await dropRedisKeys(prefix);
  });

  it('applies an invalidation on the other instances before settled() resolves', async () => {
    const a = await instance();
    const b = await instance();
    const c = await instance();
    a.targets.policies.onInvalidate!('o1', 'pay');
    a.targets.keys.onForget!({ keyIds: ['k1', 'k2'] });
    a.targets.keys.onForget!({ organizationId: 'o2' });
    a.targets.sessions.onEnd!('s1');
    expect(a.b.busy).toBe(true);
    await a.b.settled();
    expect(a.b.busy).toBe(false);
    // No waiting here: every other instance acknowledged, so it has applied them already.
    for (const other of [b, c]) {
      expect(other.calls).toEqual([
        'policy o1 pay false',
        'keys k1,k2 false',
        'org o2 false',
        'session s1 false',
      ]);
    }
    // The publisher had invalidated its own cache before publishing: it does not do it twice.
    expect(a.calls).toEqual([]);
  });

  it('stops waiting for an instance that never acknowledges, and says so', async () => {
    const a = await instance(200);
    const mute = new Redis(TEST_REDIS_URL);
    closers.push(() => mute.quit());
    await mute.subscribe(`${prefix}ch:invalidate`);
    const started = Date.now();
    a.targets.policies.onInvalidate!('o', null);
    await a.b.settled();
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(warnings).toContain('not every instance acknowledged a cache invalidation in time');
  });

  it('settled() waits for the broadcasts pending when called, not for those started later', async () => {
    const a = await instance(200);
    const mute = new Redis(TEST_REDIS_URL);
    closers.push(() => mute.quit());
    await mute.subscribe(`${prefix}ch:invalidate`);
    a.targets.policies.onInvalidate!('mine', 'pay');
    const started = Date.now();
    const settled = a.b.settled().then(() => Date.now() - started);
    // Other tenants keep changing policies: there is always a broadcast pending from now on.
    const others = setInterval(() => a.targets.policies.onInvalidate!('other', 'x'), 50);
    try {
      const waited = await Promise.race([
        settled,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('settled() waited for later broadcasts')), 1500),
        ),
      ]);
      expect(waited).toBeGreaterThanOrEqual(190);
      expect(a.b.busy).toBe(true);
    } finally {
      clearInterval(others);
    }
    await waitFor(() => !a.b.busy, 'the later broadcasts to time out');
  });

  it('trusts no cached entry from the loss of the subscriber connection until it is subscribed again', async () => {
    const a = await instance();
    const admin = new Redis(TEST_REDIS_URL);
    closers.push(() => admin.quit());
    const list = (await admin.client('LIST')) as string;
    const line = list.split('\n').find((l) => l.includes(`name=svc-sub-${a.link.instanceId}`))!;
    await admin.client('KILL', 'ID', /id=(\d+)/.exec(line)![1]!);
    await waitFor(() => a.calls.includes('keys resumed'), 'caches resumed after reconnect');
    expect(a.calls).toEqual(['policies paused', 'keys paused', 'policies resumed', 'keys resumed']);
    // And it is subscribed again: a broadcast from elsewhere still arrives.
    const b = await instance();
    b.targets.policies.onInvalidate!('o', 't');
    await b.b.settled();
    expect(a.calls).toContain('policy o t false');
  });
  it('takes a subscriber that stops answering pings as lost: caches paused, then a new connection', async () => {
    const a = await instance(2000, { everyMs: 100, timeoutMs: 50 });
    // A connection that died without a FIN: nothing closes, pings go unanswered.
    const subscriber = (a.link as unknown as { subscriber: { ping: () => Promise<string> } }).subscriber;
    const ping = subscriber.ping.bind(subscriber);
    subscriber.ping = () => new Promise(() => {});
    await waitFor(() => a.calls.includes('keys paused'), 'caches paused after an unanswered ping');
    subscriber.ping = ping;
    await waitFor(() => a.calls.includes('keys resumed'), 'caches resumed on the new connection');
    expect(a.calls).toEqual(['policies paused', 'keys paused', 'policies resumed', 'keys resumed']);
    expect(warnings).toContain(
      'redis subscriber connection did not answer a ping within 50 ms; reconnecting',
    );
    // Subscribed again: a broadcast from elsewhere still arrives.
    const b = await instance();
    b.targets.policies.onInvalidate!('o', 't');
    await b.b.settled();
    expect(a.calls).toContain('policy o t false');
  });

  it('subscribes again once it can when subscribing failed on a connection that stayed up', async () => {
    // A Redis user whose channel permissions are taken away: Redis then closes its subscriber, the
    // new connection is up, and SUBSCRIBE is refused on it until the permissions come back.
    const admin = new Redis(TEST_REDIS_URL);
    const user = `svc-test-${randomBytes(6).toString('hex')}`;
    await admin.acl('SETUSER', user, 'on', '>secret', '~*', '&*', '+@all');
    const url = new URL(TEST_REDIS_URL);
    url.username = user;
    url.password = 'secret';
    const a = await instance(2000, { everyMs: 100, timeoutMs: 1000 }, url.toString()).catch(async (err) => {
      await admin.acl('DELUSER', user);
      await admin.quit();
      throw err;
    });
    // After the instance's own close.
    closers.push(async () => {
      await admin.acl('DELUSER', user);
      await admin.quit();
    });
    await admin.acl('SETUSER', user, 'resetchannels');
    await waitFor(() => a.calls.includes('keys paused'), 'caches paused when the subscriber is closed');
    await waitFor(
      () => errors.filter((e) => e.startsWith('redis resubscribe failed')).length >= 2,
      'subscribing to be refused, and tried again',
    );
    expect(a.link.commands.status).toBe('ready');
    await admin.acl('SETUSER', user, 'allchannels');
    await waitFor(() => a.calls.includes('keys resumed'), 'subscribed again on the same connection');
    expect(a.calls).toEqual(['policies paused', 'keys paused', 'policies resumed', 'keys resumed']);
    // Subscribed again: a broadcast from elsewhere arrives.
    const b = await instance();
    b.targets.policies.onInvalidate!('o', 't');
    await b.b.settled();
    expect(a.calls).toContain('policy o t false');
  });
});
