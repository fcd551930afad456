import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PausingProxy, timed } from '../../test/pausing-proxy.js';
import { closedPort } from '../../test/ports.js';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL, waitFor } from '../../test/streams.js';
import { describeRedisUrl, RedisLink } from './redis.js';

const quiet = { warn() {}, error() {}, info() {} };

const redisPort = Number(new URL(TEST_REDIS_URL).port || 6379);

describe('RedisLink.connect', () => {
  // ioredis prints an error event nobody listens to, stack and all, with console.error.
  let printed: unknown[][] = [];
  beforeEach(() => {
    printed = [];
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
      printed.push(args);
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('fails on a database index Redis does not have, naming SVC_REDIS_URL, printing nothing', async () => {
    const url = new URL(TEST_REDIS_URL);
    url.pathname = '/99';
    const { ms, error } = await timed(() => RedisLink.connect(url.toString(), redisPrefix(), quiet));
    expect(error?.message).toBe(
      `cannot connect to Redis at SVC_REDIS_URL (${describeRedisUrl(url.toString())}): ERR DB index is out of range`,
    );
    // At once, not at the connect deadline.
    expect(ms).toBeLessThan(2000);
    expect(printed).toEqual([]);
  });

  it('fails within its deadline on a Redis that accepts and never answers', async () => {
    const proxy = await PausingProxy.start(redisPort, { paused: true });
    try {
      const { ms, error } = await timed(() =>
        RedisLink.connect(proxy.url(TEST_REDIS_URL), redisPrefix(), quiet, { connectTimeoutMs: 300 }),
      );
      expect(error?.message).toMatch(
        new RegExp(
          `^cannot connect to Redis at SVC_REDIS_URL \\(redis://127\\.0\\.0\\.1:${proxy.port}.*\\): `,
        ),
      );
      expect(error?.message).toMatch(/no answer within 300 ms/);
      expect(ms).toBeLessThan(2000);
      expect(printed).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it('says why it cannot connect, without the password and without stack traces', async () => {
    const port = await closedPort();
    const { error } = await timed(() =>
      RedisLink.connect(`redis://:hunter2@127.0.0.1:${port}`, redisPrefix(), quiet),
    );
    expect(error?.message).toBe(
      `cannot connect to Redis at SVC_REDIS_URL (redis://***@127.0.0.1:${port}): connect ECONNREFUSED 127.0.0.1:${port}`,
    );
    const unknown = await timed(() =>
      RedisLink.connect('redis://no-such-host.invalid:6379', redisPrefix(), quiet),
    );
    expect(unknown.error?.message).toMatch(
      /^cannot connect to Redis at SVC_REDIS_URL \(redis:\/\/no-such-host\.invalid:6379\): getaddrinfo (ENOTFOUND|EAI_AGAIN)/,
    );
    expect(printed).toEqual([]);
  });

  it.each([
    ['not-a-url', 'SVC_REDIS_URL must be a URL such as redis://host:6379 (or rediss:// for TLS)'],
    [
      'http://127.0.0.1:6379',
      'SVC_REDIS_URL must start with redis:// or rediss://, got http://127.0.0.1:6379/',
    ],
    [
      'redis://127.0.0.1:6379/abc',
      'SVC_REDIS_URL names database "abc": the path must be a database number (e.g. /0)',
    ],
  ])('refuses %s before connecting', async (url, message) => {
    expect((await timed(() => RedisLink.connect(url, redisPrefix(), quiet))).error?.message).toBe(message);
    expect(printed).toEqual([]);
  });
});

describe('RedisLink while the network to Redis is cut', () => {
  let proxy: PausingProxy | null = null;
  let link: RedisLink | null = null;
  const prefix = redisPrefix();
  afterEach(async () => {
    proxy?.resume();
    await link?.close();
    await proxy?.close();
    link = proxy = null;
    await dropRedisKeys(prefix);
  });

  it('fails commands within the command timeout, and answers again once it is back', async () => {
    proxy = await PausingProxy.start(redisPort);
    link = await RedisLink.connect(proxy.url(TEST_REDIS_URL), prefix, quiet, { commandTimeoutMs: 300 });
    await link.ping();
    proxy.pause();
    const { ms, error } = await timed(() => link!.ping());
    expect(error?.message).toMatch(/timed out/i);
    expect(ms).toBeLessThan(2000);
    const counted = await timed(() => link!.commands.incr(link!.key('n')));
    expect(counted.error).toBeDefined();
    expect(counted.ms).toBeLessThan(2000);
    proxy.resume();
    const l = link;
    await waitFor(
      () =>
        l.ping().then(
          () => true,
          () => false,
        ),
      'Redis answering again',
    );
  });

  it('never sends a command that timed out again on a new connection', async () => {
    proxy = await PausingProxy.start(redisPort);
    link = await RedisLink.connect(proxy.url(TEST_REDIS_URL), prefix, quiet, { commandTimeoutMs: 300 });
    const key = link.key('late');
    await link.ping();
    proxy.pause();
    // Its caller failed closed. The bytes already on their way may still arrive once the network
    // heals (as TCP would deliver them), but the command must not run a second time.
    expect((await timed(() => link!.commands.incr(key))).error?.message).toMatch(/timed out/i);
    // The connection is given up (no answer within the timeout) and made again meanwhile.
    await new Promise((r) => setTimeout(r, 800));
    proxy.resume();
    const l = link;
    await waitFor(
      () =>
        l.ping().then(
          () => true,
          () => false,
        ),
      'Redis answering again',
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(Number((await link.commands.get(key)) ?? 0)).toBeLessThanOrEqual(1);
  });

  it('closes while Redis does not answer', async () => {
    proxy = await PausingProxy.start(redisPort);
    link = await RedisLink.connect(proxy.url(TEST_REDIS_URL), prefix, quiet, { commandTimeoutMs: 300 });
    proxy.pause();
    const { ms, error } = await timed(() => link!.close());
    expect(error).toBeUndefined();
    expect(ms).toBeLessThan(2000);
    expect(link.commands.status).toBe('end');
  });
});
