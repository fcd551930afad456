import { compilePolicy, evaluate, MAX_JSON_DEPTH } from '@svc/policy-engine';
import { ApiError, type Client, type ClientOptions, createClient, type ValidationResult } from '@svc/sdk';
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

interface Logged {
  toolName: string;
  decision: string;
  reason: string;
  arguments: Record<string, unknown>;
  context: Record<string, unknown>;
}

async function decisionsOf(tenant: Tenant): Promise<Logged[]> {
  const page = await t.inject({ method: 'GET', url: '/v1/decisions?limit=100', headers: asUser(tenant) });
  return page.json().data;
}

/** A tenant with `pay` (amount at most 100) and a client with the policy cached and its errors collected. */
async function setup(options: Partial<ClientOptions> = {}) {
  const tenant = await createTenant(t);
  await putPolicy(t, tenant, 'pay', PAY);
  const errors: Error[] = [];
  const client = await connectedClient(t.url, tenant, { onError: (e) => errors.push(e), ...options });
  clients.push(client);
  expect(await client.validate('pay', { amount: 1 })).toMatchObject({ decision: 'allow', source: 'local' });
  return { tenant, client, errors };
}

/** A client of a service that cannot be reached (nothing listens on port 9), answering as `onUnavailable` says. */
const unreachable = (onUnavailable: ClientOptions['onUnavailable']) =>
  createClient({
    apiKey: 'svc_x',
    baseUrl: 'http://127.0.0.1:9',
    live: false,
    maxRetries: 0,
    closeTimeoutMs: 100,
    onUnavailable,
  });

/** `{d: {d: ... {}}}`, `levels` deep (the outer object is level 1), with `amount` at the top. */
function nested(levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = {};
  for (let i = 1; i < levels; i++) v = { d: v };
  return { amount: 1, ...v };
}

describe('a call the service would refuse is not decided locally', () => {
  const refused: [string, () => [string, Record<string, unknown>, unknown], number, string][] = [
    [
      'a NUL in a string',
      () => ['pay', { amount: 1, note: 'a\u0000b' }, undefined],
      400,
      'validation_failed',
    ],
    [
      'a lone surrogate in a value',
      () => ['pay', { amount: 1, note: '\ud800' }, undefined],
      400,
      'validation_failed',
    ],
    [
      'a lone surrogate in a key',
      () => ['pay', { amount: 1, '\ud800': 1 }, undefined],
      400,
      'validation_failed',
    ],
    ['a NUL in the context', () => ['pay', { amount: 1 }, { who: '\u0000' }], 400, 'validation_failed'],
    [
      `arguments deeper than ${MAX_JSON_DEPTH} levels`,
      () => ['pay', nested(MAX_JSON_DEPTH + 1), undefined],
      400,
      'validation_failed',
    ],
    [
      'a __proto__ key (from JSON.parse)',
      () => ['pay', JSON.parse('{"amount":1,"x":{"__proto__":{"polluted":true}}}'), undefined],
      400,
      'invalid_json',
    ],
    [
      'a constructor.prototype key',
      () => ['pay', JSON.parse('{"amount":1,"constructor":{"prototype":{}}}'), undefined],
      400,
      'invalid_json',
    ],
    [
      'a body over 1 MiB',
      () => ['pay', { amount: 1, blob: 'x'.repeat(1024 * 1024) }, undefined],
      413,
      'payload_too_large',
    ],
    ['a context that is an array', () => ['pay', { amount: 1 }, ['a']], 400, 'validation_failed'],
    ['a context that is a string', () => ['pay', { amount: 1 }, 'agent-1'], 400, 'validation_failed'],
    [
      'a tool name with a control character',
      () => ['pay\u0001', { amount: 1 }, undefined],
      400,
      'validation_failed',
    ],
    [
      'a tool name over 200 characters',
      () => ['p'.repeat(201), { amount: 1 }, undefined],
      400,
      'validation_failed',
    ],
  ];

  it.each(refused)(
    '%s: the service answers its error, the tool does not run, nothing goes unrecorded',
    async (_name, input, status, code) => {
      const { tenant, client, errors } = await setup();
      const [tool, args, context] = input();
      const err = await client
        .validate(tool, args, context as Record<string, unknown>)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status, code });
      let ran = false;
      const wrapped = client.wrap(
        tool,
        async (_a: Record<string, unknown>) => {
          ran = true;
        },
        { context: context as Record<string, unknown> },
      );
      await expect(wrapped(args)).rejects.toBeInstanceOf(ApiError);
      expect(ran).toBe(false);
      await client.close();
      // Only the first call, decided locally, is recorded; nothing was refused by the log.
      expect(errors).toEqual([]);
      expect((await decisionsOf(tenant)).map((d) => d.arguments)).toEqual([{ amount: 1 }]);
    },
  );

  it('leaves to the service, which decides and records it, a call the log could not carry', async () => {
    // Arguments 64 levels deep are within validate's limit and a log batch's (each item of a batch
    // gets the bound a single body has): decided here and recorded (see 'the depth boundary').
    const { tenant, client, errors } = await setup();
    const deep = nested(MAX_JSON_DEPTH);
    expect(await client.validate('pay', deep)).toMatchObject({ decision: 'allow', source: 'local' });
    const shallower = nested(MAX_JSON_DEPTH - 1);
    expect(await client.validate('pay', shallower)).toMatchObject({ decision: 'allow', source: 'local' });
    // Near the body limit: what validate takes, but a log record with a reason could not.
    const big = { amount: 1, blob: 'x'.repeat(1024 * 1024 - 8 * 1024) };
    expect(await client.validate('pay', big)).toMatchObject({ decision: 'allow', source: 'server' });
    await client.close();
    expect(errors).toEqual([]);
    expect(await decisionsOf(tenant)).toHaveLength(4);
  });

  it('with the service down, answers such a call with the outage, never an unrecordable allow', async () => {
    const client = unreachable('allow');
    await expect(client.validate('pay', { amount: 1, note: 'a\u0000b' })).rejects.toMatchObject({
      name: 'ServiceUnavailableError',
    });
    expect(await client.validate('pay', { amount: 1 })).toMatchObject({ decision: 'allow', source: 'local' });
    await client.close().catch(() => {});
  });
});

describe('the depth boundary: decided here exactly as deep as the service takes a call', () => {
  /** `{amount, d: {d: ... {}}}` for arguments; for a context, the same without `amount`. */
  const ctx = (levels: number) => {
    const { amount: _, ...rest } = nested(levels);
    return rest;
  };

  it(`decides and records arguments and context ${MAX_JSON_DEPTH} levels deep, and leaves one level deeper to the service, which refuses it`, async () => {
    const { tenant, client, errors } = await setup();
    // The service's boundary, asked of the service itself: it takes 64 levels, refuses 65.
    const remote = createClient({ apiKey: tenant.apiKey, baseUrl: t.url, localValidation: false });
    clients.push(remote);
    expect(await remote.validate('pay', nested(MAX_JSON_DEPTH))).toMatchObject({ decision: 'allow' });
    await expect(remote.validate('pay', nested(MAX_JSON_DEPTH + 1))).rejects.toMatchObject({
      name: 'ApiError',
      status: 400,
    });
    // The SDK: local at 64, the arguments' and the context's; the service's refusal at 65.
    const deny = { ...nested(MAX_JSON_DEPTH), amount: 500 };
    expect(await client.validate('pay', deny)).toMatchObject({ decision: 'deny', source: 'local' });
    expect(await client.validate('pay', { amount: 2 }, ctx(MAX_JSON_DEPTH))).toMatchObject({
      decision: 'allow',
      source: 'local',
    });
    await expect(client.validate('pay', nested(MAX_JSON_DEPTH + 1))).rejects.toMatchObject({
      name: 'ApiError',
      status: 400,
    });
    await expect(client.validate('pay', { amount: 3 }, ctx(MAX_JSON_DEPTH + 1))).rejects.toMatchObject({
      name: 'ApiError',
      status: 400,
    });
    // The log carried the local decisions at the boundary: none refused, each recorded as decided.
    await client.close();
    expect(errors).toEqual([]);
    const logged = (await decisionsOf(tenant)).filter((d) => d.context.source === 'client');
    const byAmount = new Map(logged.map((d) => [d.arguments.amount, d]));
    expect(logged).toHaveLength(3); // with setup's
    expect(byAmount.get(500)).toMatchObject({ decision: 'deny', arguments: deny });
    expect(byAmount.get(2)).toMatchObject({
      decision: 'allow',
      context: { ...ctx(MAX_JSON_DEPTH), source: 'client' },
    });
  });

  it(`with the service down, answers a call ${MAX_JSON_DEPTH} levels deep as onUnavailable says, and one deeper with the outage`, async () => {
    const client = unreachable('deny');
    expect(await client.validate('pay', nested(MAX_JSON_DEPTH))).toMatchObject({
      decision: 'deny',
      source: 'local',
      reason: expect.stringMatching(/fail closed/),
    });
    await expect(client.validate('pay', nested(MAX_JSON_DEPTH + 1))).rejects.toMatchObject({
      name: 'ServiceUnavailableError',
    });
    const closing = await client.close().catch((e: unknown) => e);
    // The fail-closed answer was taken into the log (which could not send it): only that one.
    expect((closing as { pending: string[] }).pending).toHaveLength(1);
  });
});

describe('a local decision is taken on the JSON the service sees', () => {
  const WHO = {
    mode: 'deterministic',
    constraints: [
      { argumentName: 'who', required: true, notNull: true },
      { argumentName: 'amount', maximum: 100 },
      { argumentName: 'at', regex: '^1970-' },
    ],
  };

  async function both(args: Record<string, unknown>) {
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', WHO);
    const errors: Error[] = [];
    const local = await connectedClient(t.url, tenant, { onError: (e) => errors.push(e) });
    clients.push(local);
    await local.validate('pay', { who: 'warm-up', amount: 1 });
    const remote = createClient({ apiKey: tenant.apiKey, baseUrl: t.url, localValidation: false });
    clients.push(remote);
    const l = await local.validate('pay', args);
    const r = await remote.validate('pay', args);
    return { l, r, errors, tenant, local };
  }

  const strip = ({ decision, reason, failedConstraints }: ValidationResult) => ({
    decision,
    reason,
    failedConstraints,
  });

  // Each but the last two is decided the other way on the JavaScript value.
  const cases: [string, () => Record<string, unknown>, string][] = [
    ['NaN (null in JSON)', () => ({ who: Number.NaN, amount: 1 }), 'deny'],
    ['-Infinity (null in JSON)', () => ({ who: 'a', amount: Number.NEGATIVE_INFINITY }), 'deny'],
    ['a function (left out of JSON)', () => ({ who: () => 'a', amount: 1 }), 'deny'],
    ['a Symbol (left out of JSON)', () => ({ who: Symbol('a'), amount: 1 }), 'deny'],
    ['a Date (a string in JSON)', () => ({ who: 'a', amount: 1, at: new Date(0) }), 'allow'],
    ['an object with toJSON', () => ({ who: 'a', amount: { toJSON: () => 5 } }), 'allow'],
    [
      'a non-enumerable property (left out of JSON)',
      () => Object.defineProperty({ amount: 1 }, 'who', { value: 'a', enumerable: false }),
      'deny',
    ],
    ['undefined in an array (null in JSON)', () => ({ who: 'a', amount: 1, list: [undefined] }), 'allow'],
    ['a Map (an empty object in JSON)', () => ({ who: new Map([['a', 1]]), amount: 1 }), 'allow'],
  ];

  it.each(cases)(
    '%s: the local decision is the service’s, and is recorded',
    async (_name, args, expected) => {
      const { l, r, errors, tenant, local } = await both(args());
      expect(l.source).toBe('local');
      expect(r.source).toBe('server');
      expect(r.decision).toBe(expected);
      expect(strip(l)).toEqual(strip(r));
      await local.close();
      expect(errors).toEqual([]);
      // The warm-up, the local decision and the service's own.
      expect(await decisionsOf(tenant)).toHaveLength(3);
    },
  );

  it('records what was decided: the JSON of the arguments at the call', async () => {
    const { l, tenant, local } = await both({ who: 'a', amount: 1, at: new Date(0), n: Number.NaN });
    expect(l).toMatchObject({ decision: 'allow', source: 'local' });
    await local.close();
    const logged = (await decisionsOf(tenant)).filter((d) => d.context.source === 'client');
    expect(logged.map((d) => d.arguments)).toContainEqual({
      who: 'a',
      amount: 1,
      at: '1970-01-01T00:00:00.000Z',
      n: null,
    });
  });
});

describe('the logged reason', () => {
  it('is cut between characters, so a long reason with astral characters is still recorded', async () => {
    // Many missing arguments whose names hold emoji: a reason over 2000 UTF-16 units, with the
    // 2000th unit the first half of a surrogate pair (the filler's length puts it there).
    const names = Array.from({ length: 60 }, (_, i) => `arg${i}_${'😀'.repeat(10)}`);
    let policy: { mode: string; constraints: { argumentName: string; required: boolean }[] } | undefined;
    let reason = '';
    for (let filler = 0; filler < 40 && !policy; filler++) {
      const candidate = {
        mode: 'deterministic',
        constraints: [`${'f'.repeat(filler + 1)}`, ...names].map((argumentName) => ({
          argumentName,
          required: true,
        })),
      };
      reason =
        evaluate(
          compilePolicy({
            ...candidate,
            mode: 'deterministic',
            sessionConstraints: null,
            llmConfig: null,
          } as never),
          {},
        ).reason ?? '';
      const c = reason.charCodeAt(1999);
      if (reason.length > 2000 && c >= 0xd800 && c <= 0xdbff) policy = candidate;
    }
    expect(policy).toBeDefined();
    const tenant = await createTenant(t);
    await putPolicy(t, tenant, 'pay', policy!);
    const errors: Error[] = [];
    const client = createClient({
      apiKey: tenant.apiKey,
      baseUrl: t.url,
      live: false,
      onError: (e) => errors.push(e),
    });
    const r = await client.validate('pay', {});
    expect(r).toMatchObject({ decision: 'deny', source: 'local', reason });
    await client.close();
    expect(errors).toEqual([]);
    const [logged] = await decisionsOf(tenant);
    expect(logged!.reason).toBe(reason.slice(0, 1999));
  });
});
