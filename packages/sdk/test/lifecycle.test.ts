import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { type Client, type ClientOptions, createClient, FlushError } from '@svc/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { useTestApp } from '../../server/test/fixture.js';
import { asUser, type Tenant } from '../../server/test/helpers.js';
import { connectedClient, createTenant, putPolicy } from './live.js';

const t = useTestApp({}, { listen: true });
const clients: Client[] = [];
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
});

const PAY = { mode: 'deterministic', constraints: [{ argumentName: 'amount', maximum: 100 }] };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function tenantWithPolicy(): Promise<Tenant> {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', PAY);
  return tenant;
}

async function decisionsOf(tenant: Tenant): Promise<{ arguments: Record<string, unknown> }[]> {
  const page = await t.inject({ method: 'GET', url: '/v1/decisions?limit=100', headers: asUser(tenant) });
  return page.json().data;
}

function track(c: Client): Client {
  clients.push(c);
  return c;
}

/** Unhandled rejections while `run` runs and shortly after. */
async function unhandledDuring(run: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const listener = (reason: unknown) => seen.push(reason);
  process.on('unhandledRejection', listener);
  try {
    await run();
    await sleep(100);
  } finally {
    process.off('unhandledRejection', listener);
  }
  return seen;
}

describe('the event stream going silent (half-open)', () => {
  /** A fetch whose event stream can be made to deliver nothing more while its connection stays open. */
  function silenceable() {
    let silent = false;
    const silenceableFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (!String(input).includes('/v1/events/stream') || !res.body) return res;
      const reader = res.body.getReader();
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) return controller.close();
            if (!silent) return controller.enqueue(value);
          }
        },
        cancel: (reason) => reader.cancel(reason),
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    return {
      fetch: silenceableFetch,
      silence: () => {
        silent = true;
      },
    };
  }

  it('stops vouching for a cached policy maxStalenessMs after its last byte', async () => {
    const tenant = await tenantWithPolicy();
    const { fetch: f, silence } = silenceable();
    const client = track(await connectedClient(t.url, tenant, { fetch: f, maxStalenessMs: 300 }));
    expect(await client.validate('pay', { amount: 30 })).toMatchObject({
      decision: 'allow',
      source: 'local',
    });
    silence();
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 10 }],
    });
    const changed = Date.now();
    let r = await client.validate('pay', { amount: 30 });
    while (r.decision === 'allow' && Date.now() - changed < 5000) {
      await sleep(20);
      r = await client.validate('pay', { amount: 30 });
    }
    // The update never arrived: the policy was fetched again once the silence passed the bound.
    expect(r).toMatchObject({ decision: 'deny', source: 'local' });
    expect(Date.now() - changed).toBeLessThan(2000);
  });
});

describe('a policy event the service failed to deliver', () => {
  /**
   * A fetch whose event stream loses every policy event (as from an instance of the service that
   * missed it) while it keeps heartbeating, every 50 ms; it notes when each policy was read.
   */
  function losingPolicyEvents() {
    const seen = { policyReads: [] as number[], dropped: 0 };
    const encoder = new TextEncoder();
    const losingFetch: typeof fetch = async (input, init) => {
      const url = String(input);
      if (url.includes('/v1/policies/')) seen.policyReads.push(performance.now());
      const res = await fetch(input, init);
      if (!url.includes('/v1/events/stream') || !res.body) return res;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let heartbeat: ReturnType<typeof setInterval> | undefined;
      let partial = '';
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          heartbeat = setInterval(() => {
            try {
              controller.enqueue(encoder.encode(':ping\n\n'));
            } catch {
              clearInterval(heartbeat);
            }
          }, 50);
        },
        async pull(controller) {
          for (;;) {
            const { value, done } = await reader.read().catch((err) => {
              clearInterval(heartbeat);
              throw err;
            });
            if (done) {
              clearInterval(heartbeat);
              return controller.close();
            }
            // Whole frames only, so a heartbeat never lands inside one.
            const frames = (partial + value).split('\n\n');
            partial = frames.pop()!;
            const kept = frames.filter((frame) => !/^event: ?policy\./m.test(frame));
            seen.dropped += frames.length - kept.length;
            if (kept.length > 0) {
              return controller.enqueue(encoder.encode(kept.map((f) => `${f}\n\n`).join('')));
            }
          }
        },
        cancel(reason) {
          clearInterval(heartbeat);
          return reader.cancel(reason);
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    return { fetch: losingFetch, seen };
  }

  it('uses the cached policy until maxPolicyAgeMs after its fetch, then fetches it again', async () => {
    const tenant = await tenantWithPolicy();
    const { fetch: f, seen } = losingPolicyEvents();
    const maxPolicyAgeMs = 1500;
    const client = track(
      await connectedClient(t.url, tenant, { fetch: f, maxStalenessMs: 1000, maxPolicyAgeMs }),
    );
    expect(await client.validate('pay', { amount: 30 })).toMatchObject({
      decision: 'allow',
      source: 'local',
    });
    expect(seen.policyReads).toHaveLength(1);
    const fetchedAt = seen.policyReads[0]!;
    await putPolicy(t, tenant, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', maximum: 10 }],
    });
    // Before the bound: the cached policy, and no read, while the stream vouches for it.
    while (performance.now() - fetchedAt < maxPolicyAgeMs - 200) {
      expect(await client.validate('pay', { amount: 30 })).toMatchObject({
        decision: 'allow',
        source: 'local',
      });
      await sleep(20);
    }
    expect(seen.dropped).toBeGreaterThan(0); // the service did send the event
    expect(seen.policyReads).toHaveLength(1);
    while (performance.now() - fetchedAt <= maxPolicyAgeMs) await sleep(5);
    // The first calls past it fetch the policy again (once for both) and are decided on the new one.
    const after = await Promise.all([
      client.validate('pay', { amount: 30 }),
      client.validate('pay', { amount: 30 }),
    ]);
    for (const r of after) expect(r).toMatchObject({ decision: 'deny', source: 'local' });
    expect(seen.policyReads).toHaveLength(2);
  });
});

describe('user callbacks that throw', () => {
  const throwing = () => {
    throw new Error('callback bug');
  };

  it('an onError that throws neither crashes the process nor changes an answer', async () => {
    const unhandled = await unhandledDuring(async () => {
      // The stream cannot connect, the validation falls back (fail closed), the log cannot send.
      const client = track(
        createClient({
          apiKey: 'svc_x',
          baseUrl: 'http://127.0.0.1:9',
          maxRetries: 0,
          closeTimeoutMs: 200,
          log: { flushIntervalMs: 10 },
          onError: throwing,
        }),
      );
      expect(await client.validate('pay', { amount: 1 })).toMatchObject({
        decision: 'deny',
        source: 'local',
      });
      await sleep(300);
      await expect(client.close()).rejects.toBeInstanceOf(FlushError);
    });
    expect(unhandled).toEqual([]);
  });

  it('an onError that throws on a refused log record', async () => {
    const tenant = await tenantWithPolicy();
    const unhandled = await unhandledDuring(async () => {
      const client = track(
        createClient({
          apiKey: tenant.apiKey,
          baseUrl: t.url,
          live: false,
          log: { snapshot: false, flushIntervalMs: 10 },
          onError: throwing,
        }),
      );
      const args: Record<string, unknown> = { amount: 1 };
      await client.validate('pay', args);
      // Changed after the call, which snapshot: false records: the server refuses it.
      args.note = 'a\u0000b';
      await sleep(300);
      await client.validate('pay', { amount: 2 });
      await client.close();
    });
    expect(unhandled).toEqual([]);
    expect((await decisionsOf(tenant)).map((d) => d.arguments.amount)).toEqual([2]);
  });

  it('an onStreamChange that throws keeps the stream up and is reported to onError', async () => {
    const tenant = await tenantWithPolicy();
    const errors: Error[] = [];
    const unhandled = await unhandledDuring(async () => {
      const client = track(
        await connectedClient(t.url, tenant, {
          onStreamChange: throwing as ClientOptions['onStreamChange'],
          onError: (e) => errors.push(e),
        }),
      );
      expect(await client.validate('pay', { amount: 1 })).toMatchObject({ source: 'local' });
      await client.close();
    });
    expect(unhandled).toEqual([]);
    expect(errors.map((e) => e.message)).toContain('callback bug');
  });
});

describe('close()', () => {
  it('a second close() resolves only once the first has flushed', async () => {
    const tenant = await tenantWithPolicy();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let posted!: () => void;
    const firstPost = new Promise<void>((r) => {
      posted = r;
    });
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      fetch: async (input, init) => {
        if (String(input).endsWith('/v1/decisions') && init?.method === 'POST') {
          posted();
          await gate;
        }
        return fetch(input, init);
      },
    });
    await client.validate('pay', { amount: 1 });
    const first = client.close();
    await firstPost;
    let secondDone = false;
    const second = client.close().then(() => {
      secondDone = true;
    });
    await sleep(50);
    expect(secondDone).toBe(false);
    release();
    await second;
    await first;
    expect(await decisionsOf(tenant)).toHaveLength(1);
  });
});

describe('a Node process that ends without close()', () => {
  const root = join(import.meta.dirname, '..', '..', '..');
  /** Runs a script that decides `n` calls locally and returns without close(); its exit status and output. */
  function runChild(tenant: Tenant, options: Record<string, unknown>, n: number) {
    const script = [
      "import { createClient } from '@svc/sdk';",
      `const client = createClient({ apiKey: process.env.SVC_KEY, baseUrl: process.env.SVC_URL, ...${JSON.stringify(options)} });`,
      `for (let i = 0; i < ${n}; i++) {`,
      "  const r = await client.validate('pay', { amount: i });",
      "  if (r.source !== 'local') throw new Error('not decided locally');",
      '}',
      "console.log('decided');",
    ].join('\n');
    return new Promise<{ code: number | null; killed: boolean; stdout: string; stderr: string }>(
      (resolve) => {
        const child = execFile(
          process.execPath,
          ['--conditions=@svc/source', '--import', 'tsx', '--input-type=module', '-e', script],
          {
            cwd: root,
            env: { ...process.env, SVC_KEY: tenant.apiKey, SVC_URL: t.url },
            timeout: 20_000,
            encoding: 'utf8',
          },
          (_err, stdout, stderr) => resolve({ code: child.exitCode, killed: child.killed, stdout, stderr }),
        );
      },
    );
  }

  it('sends its pending decisions before exiting (no event stream)', async () => {
    const tenant = await tenantWithPolicy();
    const out = await runChild(tenant, { live: false, log: { flushIntervalMs: 60_000 } }, 5);
    expect(out, out.stderr).toMatchObject({ code: 0, killed: false, stdout: 'decided\n' });
    expect(await decisionsOf(tenant)).toHaveLength(5);
  }, 30_000);

  it('is not kept alive by the event stream, and sends its pending decisions', async () => {
    const tenant = await tenantWithPolicy();
    const started = Date.now();
    const out = await runChild(tenant, { streamIdleMs: 500, log: { flushIntervalMs: 60_000 } }, 5);
    expect(out, out.stderr).toMatchObject({ code: 0, killed: false, stdout: 'decided\n' });
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(await decisionsOf(tenant)).toHaveLength(5);
  }, 30_000);
});
